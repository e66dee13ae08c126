// Transactions of one transactional id written with Kafka's own Java producer, for the tests
// that hand a transactional id between Kafka and kafkalog serve
// (tests/test_kafka_oracle_serve.py). Run as a single file:
//   java -cp <kafka-clients classpath> interop/TransactionalProducer.java \
//       BOOTSTRAP TRANSACTIONAL_ID TOPIC TAG ENDS
// ENDS is a string of "c" (commit) and "a" (abort), one transaction each; transaction n writes
// the values TAG-n-0, TAG-n-1, TAG-n-2 to partition 0 of TOPIC. A Kafka 4 client speaks
// transaction version 2 when the broker finalizes it. Prints "committed n" or "aborted n" after
// each end; any error ends the program with it.

import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class TransactionalProducer {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args[1]);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        String topic = args[2], tag = args[3], ends = args[4];
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            for (int n = 0; n < ends.length(); n++) {
                producer.beginTransaction();
                for (int i = 0; i < 3; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, null, tag + "-" + n + "-" + i)).get();
                }
                if (ends.charAt(n) == 'c') {
                    producer.commitTransaction();
                    System.out.println("committed " + n);
                } else {
                    producer.abortTransaction();
                    System.out.println("aborted " + n);
                }
            }
        }
    }
}
