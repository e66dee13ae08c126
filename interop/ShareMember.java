// One share group member (KIP-932) written with Kafka's own KafkaShareConsumer, run by the
// share group tests against kafkalog serve. Run as a single file:
//   java -cp <kafka-clients classpath> interop/ShareMember.java BOOTSTRAP GROUP TOPIC MODE
// MODE "explicit": each record is acknowledged by its value's last character: "p" (poison)
// RELEASE every time, "r" RELEASE on its first delivery, "x" REJECT, anything else ACCEPT,
// committed after each poll. MODE "implicit": share.acknowledgement.mode implicit (each poll
// accepts what the last one returned). MODE "hold": takes the records of its first non-empty
// poll and never settles them (it stops polling; the test kills it).
// Prints "<partition> <offset> <delivery count> <value> <ack>" per record, until killed or
// stopped; "joined" once subscribed; in explicit mode, after each commit, "committed" and the
// offsets whose acknowledgements the broker confirmed.

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareMember {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2], mode = args[3];
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("share.acknowledgement.mode", mode.equals("implicit") ? "implicit" : "explicit");
        props.put("max.poll.records", "20");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            System.out.println("joined");
            System.out.flush();
            while (true) {
                var records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, String> record : records) {
                    String value = record.value();
                    int count = record.deliveryCount().orElse((short) -1);
                    String ack = "ACCEPT";
                    if (mode.equals("hold")) {
                        ack = "HELD";
                    } else if (mode.equals("explicit")) {
                        AcknowledgeType type = value.endsWith("p")
                            || (value.endsWith("r") && count == 1)
                            ? AcknowledgeType.RELEASE
                            : value.endsWith("x") ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
                        consumer.acknowledge(record, type);
                        ack = type.toString();
                    }
                    System.out.println(record.partition() + " " + record.offset() + " " + count
                        + " " + value + " " + ack);
                }
                System.out.flush();
                if (mode.equals("hold") && !records.isEmpty()) {
                    Thread.sleep(Long.MAX_VALUE);
                }
                if (mode.equals("explicit") && !records.isEmpty()) {
                    // "committed <offset> ..." for each partition whose acknowledgements
                    // the broker took (its answer came after they were durable)
                    var results = consumer.commitSync();
                    StringBuilder done = new StringBuilder("committed");
                    for (ConsumerRecord<String, String> record : records) {
                        var tip = new org.apache.kafka.common.TopicIdPartition(
                            results.keySet().stream()
                                .filter(t -> t.partition() == record.partition())
                                .map(t -> t.topicId()).findFirst()
                                .orElse(org.apache.kafka.common.Uuid.ZERO_UUID),
                            record.partition(), record.topic());
                        var outcome = results.get(tip);
                        if (outcome != null && outcome.isEmpty()) {
                            done.append(" ").append(record.offset());
                        }
                    }
                    System.out.println(done);
                    System.out.flush();
                }
            }
        }
    }
}
