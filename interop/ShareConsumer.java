// A share group member (KIP-932) written with Kafka's own KafkaShareConsumer, for the tests of
// share groups' records (tests/test_kafka_oracle_dump.py). Run as a single file:
//   java -cp <kafka-clients classpath> interop/ShareConsumer.java BOOTSTRAP GROUP TOPIC COUNT
// It sets the group's share.auto.offset.reset to earliest (a group config), subscribes to
// TOPIC with explicit acknowledgement, and acknowledges each record by its value's last
// character: "r" RELEASE on its first delivery (delivered again, then accepted), "x" REJECT
// (never delivered again), anything else ACCEPT, committing after each poll. Prints "<offset> <delivery count> <ack>" per record; exits once
// COUNT records were accepted or rejected, or after 60 s without one.

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2];
        int wanted = Integer.parseInt(args[3]);
        Properties adminProps = new Properties();
        adminProps.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp earliest = new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get();
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        int done = 0;
        long lastProgress = System.currentTimeMillis();
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (done < wanted && System.currentTimeMillis() - lastProgress < 60_000) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(500))) {
                    String value = record.value();
                    int count = record.deliveryCount().orElse((short) -1);
                    AcknowledgeType type = value.endsWith("r") && count == 1
                        ? AcknowledgeType.RELEASE
                        : value.endsWith("x") ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
                    consumer.acknowledge(record, type);
                    System.out.println(record.offset() + " " + count + " " + type);
                    if (type != AcknowledgeType.RELEASE) {
                        done++;
                        lastProgress = System.currentTimeMillis();
                    }
                }
                consumer.commitSync();
            }
        }
        if (done < wanted) {
            System.err.println("only " + done + " of " + wanted + " records settled");
            System.exit(1);
        }
    }
}
