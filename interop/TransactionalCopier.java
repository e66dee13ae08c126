// An exactly-once consume-transform-produce loop written with Kafka's own Java client, for the
// kafkalog serve transaction tests (tests/test_server_transactions.py). Run as a single file:
//   java -cp <kafka-clients classpath> interop/TransactionalCopier.java \
//       BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID COUNT ABORT_EVERY
// It reads INPUT with isolation.level=read_committed in group GROUP, writes each value upper-cased
// to OUTPUT (same key and partition), and commits the consumed offsets inside the transaction
// (sendOffsetsToTransaction). Every ABORT_EVERY-th transaction (0: none) is first written and
// aborted, then done again and committed. After any error (the broker killed, a timeout) it
// closes both clients and starts over from the group's committed offsets, as an exactly-once
// application must. Prints "committed <n>" after each commit; exits once COUNT input offsets are
// committed in total, or after 120 s without progress.

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TransactionalCopier {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], input = args[1], output = args[2], group = args[3], txnId = args[4];
        long wanted = Long.parseLong(args[5]);
        int abortEvery = Integer.parseInt(args[6]);
        long progressAt = System.currentTimeMillis();
        int transactions = 0;
        while (System.currentTimeMillis() - progressAt < 120_000) {
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(bootstrap, group));
                 KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(bootstrap, txnId))) {
                producer.initTransactions();
                consumer.subscribe(List.of(input));
                while (System.currentTimeMillis() - progressAt < 120_000) {
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                    if (records.isEmpty()) {
                        if (committedTotal(consumer, input) >= wanted) {
                            return;
                        }
                        continue;
                    }
                    transactions++;
                    if (abortEvery > 0 && transactions % abortEvery == 0) {
                        producer.beginTransaction();
                        send(producer, records, output);
                        producer.sendOffsetsToTransaction(offsets(records), consumer.groupMetadata());
                        producer.flush();
                        producer.abortTransaction();
                    }
                    producer.beginTransaction();
                    send(producer, records, output);
                    producer.sendOffsetsToTransaction(offsets(records), consumer.groupMetadata());
                    producer.commitTransaction();
                    progressAt = System.currentTimeMillis();
                    System.out.println("committed " + records.count());
                    System.out.flush();
                }
            } catch (Exception e) {
                System.out.println("restarting after " + e.getClass().getSimpleName() + ": " + e.getMessage());
                System.out.flush();
                Thread.sleep(500);
            }
        }
        System.exit(2);
    }

    static void send(KafkaProducer<String, String> producer, ConsumerRecords<String, String> records, String output) {
        for (ConsumerRecord<String, String> r : records) {
            producer.send(new ProducerRecord<>(output, r.partition(), r.key(), r.value().toUpperCase()));
        }
    }

    static Map<TopicPartition, OffsetAndMetadata> offsets(ConsumerRecords<String, String> records) {
        Map<TopicPartition, OffsetAndMetadata> out = new HashMap<>();
        for (TopicPartition tp : records.partitions()) {
            List<ConsumerRecord<String, String>> part = records.records(tp);
            out.put(tp, new OffsetAndMetadata(part.get(part.size() - 1).offset() + 1));
        }
        return out;
    }

    static long committedTotal(KafkaConsumer<String, String> consumer, String input) {
        long total = 0;
        var partitions = consumer.partitionsFor(input);
        var tps = new java.util.HashSet<TopicPartition>();
        for (var p : partitions) {
            tps.add(new TopicPartition(input, p.partition()));
        }
        for (OffsetAndMetadata o : consumer.committed(tps).values()) {
            if (o != null) {
                total += o.offset();
            }
        }
        return total;
    }

    static Properties consumerProps(String bootstrap, String group) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return props;
    }

    static Properties producerProps(String bootstrap, String txnId) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "20000");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "15000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return props;
    }
}
