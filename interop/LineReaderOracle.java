// Reads stdin with Kafka's own console-producer parser (org.apache.kafka.tools.LineMessageReader)
// and prints each record it makes, for tests/test_kafka_oracle_console.py. Arguments are the
// reader's properties as key=value. Output, a line per record, every field hex or "null":
//   record <key> <value> <headerKey>=<headerValue>,...
// and "error <message>" where the reader refuses a line. Run as a single-file program:
//   java -cp <kafka classpath> LineReaderOracle.java parse.key=true < lines
import java.util.HashMap;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.tools.LineMessageReader;

public class LineReaderOracle {
    static String hex(byte[] bytes) {
        return bytes == null ? "null" : "x" + HexFormat.of().formatHex(bytes);
    }

    public static void main(String[] args) {
        Map<String, Object> props = new HashMap<>();
        props.put("topic", "t");
        for (String arg : args) {
            String[] kv = arg.split("=", 2);
            props.put(kv[0], kv.length > 1 ? kv[1] : "");
        }
        LineMessageReader reader = new LineMessageReader();
        try {
            reader.configure(props);
            Iterator<ProducerRecord<byte[], byte[]>> records = reader.readRecords(System.in);
            while (records.hasNext()) {
                ProducerRecord<byte[], byte[]> record = records.next();
                StringBuilder line = new StringBuilder("record\t");
                line.append(hex(record.key())).append('\t').append(hex(record.value())).append('\t');
                for (Header header : record.headers()) {
                    line.append(hex(header.key().getBytes(java.nio.charset.StandardCharsets.UTF_8)))
                        .append('=').append(hex(header.value())).append(',');
                }
                System.out.println(line);
            }
        } catch (KafkaException e) {
            System.out.println("error\t" + e.getMessage());
        }
    }
}
