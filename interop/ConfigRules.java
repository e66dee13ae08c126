// Kafka's own answer to "is this topic config value valid?" (LogConfig.validate) and its broker
// defaults (KafkaConfig's ConfigDef), for tests/test_kafka_oracle_config.py. Run as a
// single-file program on the oracle's classpath:
//   java -cp <kafka classpath> ConfigRules.java validate key=value ...   -> ok|refused <message>
//   java -cp <kafka classpath> ConfigRules.java broker-defaults          -> name <tab> default
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.storage.internals.log.LogConfig;

public class ConfigRules {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("validate")) {
            for (int i = 1; i < args.length; i++) {
                String[] kv = args[i].split("=", 2);
                Map<String, String> props = new HashMap<>();
                props.put(kv[0], kv[1]);
                try {
                    LogConfig.validate(props);
                    System.out.println("ok");
                } catch (Exception e) {
                    System.out.println("refused\t" + e.getMessage());
                }
            }
        } else {
            ConfigDef def = (ConfigDef) Class.forName("kafka.server.KafkaConfig")
                .getMethod("configDef").invoke(null);
            for (Map.Entry<String, ConfigDef.ConfigKey> e : new TreeMap<>(def.configKeys()).entrySet()) {
                Object value = e.getValue().defaultValue;
                System.out.println(e.getKey() + "\t" + (value == ConfigDef.NO_DEFAULT_VALUE ? "<none>" : value));
            }
        }
    }
}
