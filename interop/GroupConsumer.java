// A consumer-group member written with Kafka's own Java client, for the kafkalog serve tests
// (tests/test_server_java_clients.py). Run as a single source file:
//   java -cp <kafka-clients classpath> interop/GroupConsumer.java BOOTSTRAP GROUP TOPIC COUNT
// It subscribes, prints "assigned <partitions>" on each assignment, then one line per record
// ("<partition> <offset> <key> <value>"), commits synchronously after each poll, and exits
// after COUNT records, or after 60 s without one.

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class GroupConsumer {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args[1]);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        int wanted = Integer.parseInt(args[3]);
        int seen = 0;
        long idleSince = System.currentTimeMillis();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {}

                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    System.out.println("assigned " + partitions.size());
                    System.out.flush();
                }
            });
            while (seen < wanted && System.currentTimeMillis() - idleSince < 60_000) {
                var records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : records) {
                    System.out.println(r.partition() + " " + r.offset() + " " + r.key() + " " + r.value());
                    seen++;
                    idleSince = System.currentTimeMillis();
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
                System.out.flush();
            }
        }
    }
}
