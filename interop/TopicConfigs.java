// Prints Kafka's own topic config keys with their defaults, and the broker synonyms of each
// (LogConfig, ServerTopicConfigSynonyms), for tests/test_kafka_oracle_config.py. Run as a
// single-file program on the oracle's classpath: java -cp <kafka classpath> TopicConfigs.java
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.apache.kafka.server.config.ConfigSynonym;
import org.apache.kafka.server.config.ServerTopicConfigSynonyms;
import org.apache.kafka.storage.internals.log.LogConfig;

public class TopicConfigs {
    public static void main(String[] args) {
        Map<String, Object> defaults = LogConfig.configDefCopy().defaultValues();
        for (String name : new TreeSet<>(LogConfig.configNames())) {
            Object value = defaults.get(name);
            System.out.println("default\t" + name + "\t" + (value == null ? "null" : value));
        }
        for (Map.Entry<String, List<ConfigSynonym>> entry :
                ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS.entrySet()) {
            StringBuilder line = new StringBuilder("synonym\t" + entry.getKey());
            for (ConfigSynonym synonym : entry.getValue()) {
                // the converter applied to 1 gives the factor to milliseconds
                line.append('\t').append(synonym.name()).append('=')
                    .append(synonym.converter().apply("1"));
            }
            System.out.println(line);
        }
    }
}
