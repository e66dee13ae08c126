// A consumer-group member written with Kafka's own Java client, for the kafkalog serve tests
// (tests/test_server_java_clients.py). Run as a single source file:
//   java -cp <kafka-clients classpath> interop/GroupConsumer.java BOOTSTRAP GROUP TOPIC COUNT [PROTOCOL]
// PROTOCOL is group.protocol: classic (the default) or consumer (KIP-848); TOPIC is a regular
// expression when it starts with "regex:".
// It subscribes, prints "assigned <partitions held>" on each assignment and "revoked <n>" on
// each revocation, then one line per record
// ("<partition> <offset> <key> <value>"), commits synchronously after each poll, and exits
// after COUNT records, or after 60 s without one; on SIGTERM it prints "closing" and leaves
// the group as close() does.

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
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
        if (args.length > 4) {
            props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, args[4]);
        }
        int wanted = Integer.parseInt(args[3]);
        int seen = 0;
        long idleSince = System.currentTimeMillis();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    if (!partitions.isEmpty()) {
                        System.out.println("revoked " + partitions.size());
                        System.out.flush();
                    }
                }

                // the partitions held after the change (the consumer protocol hands over
                // only the added ones here; the classic one all of them)
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    System.out.println("assigned " + consumer.assignment().size());
                    System.out.flush();
                }
            };
            if (args[2].startsWith("regex:")) {
                consumer.subscribe(new SubscriptionPattern(args[2].substring(6)), listener);
            } else {
                consumer.subscribe(List.of(args[2]), listener);
            }
            // SIGTERM: leave the group as close() leaves it (a rolling restart's member)
            Thread main = Thread.currentThread();
            Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                consumer.wakeup();
                try {
                    main.join(20_000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }));
            try {
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
            } catch (WakeupException e) {
                System.out.println("closing");
                System.out.flush();
            }
        }
    }
}
