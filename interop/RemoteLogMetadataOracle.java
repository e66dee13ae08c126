// Kafka's own RemoteLogMetadataSerde and RemoteLogMetadataTopicPartitioner (the records of
// __remote_log_metadata, KIP-405) over cases read from stdin, for the differential test of
// kafkalog's (tests/test_remote_log_metadata.py). Run as a single file:
//   java -cp <Kafka classpath> interop/RemoteLogMetadataOracle.java < cases
// One case a line, fields separated by spaces; one answer a line:
//   D <value hex>                       -> Kafka's re-serialization (hex) TAB its toString()
//   P <topic id> <partition> <n>        -> the metadata partition of that topic-partition
//   S <topic id> <topic> <partition> <segment id> <start> <end> <max ts> <broker> <event ts>
//     <size> <epoch:offset,...> <state id> <custom hex or -> <txn index empty>
//                                       -> the RemoteLogSegmentMetadata record (hex)
//   U <topic id> <topic> <partition> <segment id> <event ts> <state id> <broker> <custom or ->
//                                       -> the RemoteLogSegmentMetadataUpdate record (hex)
//   X <topic id> <topic> <partition> <state id> <event ts> <broker>
//                                       -> the RemotePartitionDeleteMetadata record (hex)
//   N <segment id> <start> <end> <max ts> <broker> <event ts> <size> <epoch:offset,...>
//     <state id> <custom hex or -> <txn index empty>
//                                       -> the RemoteLogSegmentMetadataSnapshot record (hex)
//   T <s or p> <from state id or -> <to state id>
//                                       -> isValidTransition of the segment (s) or partition
//                                          deletion (p) states: true or false
// A case Kafka refuses answers "ERR " and the exception's class.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.metadata.storage.RemoteLogMetadataTopicPartitioner;
import org.apache.kafka.server.log.remote.metadata.storage.RemoteLogSegmentMetadataSnapshot;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteState;

public class RemoteLogMetadataOracle {
    static final HexFormat HEX = HexFormat.of();

    static TopicIdPartition tp(String id, String topic, String partition) {
        return new TopicIdPartition(Uuid.fromString(id), new TopicPartition(topic, Integer.parseInt(partition)));
    }

    static Optional<CustomMetadata> custom(String field) {
        return field.equals("-") ? Optional.empty() : Optional.of(new CustomMetadata(HEX.parseHex(field)));
    }

    static Map<Integer, Long> epochs(String field) {
        Map<Integer, Long> out = new HashMap<>();
        for (String pair : field.split(",")) {
            String[] eo = pair.split(":");
            out.put(Integer.parseInt(eo[0]), Long.parseLong(eo[1]));
        }
        return out;
    }

    static String answer(RemoteLogMetadataSerde serde, String[] f) {
        switch (f[0]) {
            case "D": {
                var metadata = serde.deserialize(HEX.parseHex(f[1]));
                return HEX.formatHex(serde.serialize(metadata)) + "\t" + metadata;
            }
            case "P":
                return Integer.toString(new RemoteLogMetadataTopicPartitioner(Integer.parseInt(f[3]))
                    .metadataPartition(tp(f[1], "t", f[2])));
            case "S": {
                var metadata = new RemoteLogSegmentMetadata(
                    new RemoteLogSegmentId(tp(f[1], f[2], f[3]), Uuid.fromString(f[4])),
                    Long.parseLong(f[5]), Long.parseLong(f[6]), Long.parseLong(f[7]),
                    Integer.parseInt(f[8]), Long.parseLong(f[9]), Integer.parseInt(f[10]),
                    custom(f[13]), RemoteLogSegmentState.forId(Byte.parseByte(f[12])), epochs(f[11]),
                    Boolean.parseBoolean(f[14]));
                return HEX.formatHex(serde.serialize(metadata));
            }
            case "N": {
                var snapshot = new RemoteLogSegmentMetadataSnapshot(Uuid.fromString(f[1]),
                    Long.parseLong(f[2]), Long.parseLong(f[3]), Long.parseLong(f[4]),
                    Integer.parseInt(f[5]), Long.parseLong(f[6]), Integer.parseInt(f[7]),
                    custom(f[10]), RemoteLogSegmentState.forId(Byte.parseByte(f[9])), epochs(f[8]),
                    Boolean.parseBoolean(f[11]));
                return HEX.formatHex(serde.serialize(snapshot));
            }
            case "U": {
                var update = new RemoteLogSegmentMetadataUpdate(
                    new RemoteLogSegmentId(tp(f[1], f[2], f[3]), Uuid.fromString(f[4])),
                    Long.parseLong(f[5]), custom(f[8]),
                    RemoteLogSegmentState.forId(Byte.parseByte(f[6])), Integer.parseInt(f[7]));
                return HEX.formatHex(serde.serialize(update));
            }
            case "X": {
                var delete = new RemotePartitionDeleteMetadata(tp(f[1], f[2], f[3]),
                    RemotePartitionDeleteState.forId(Byte.parseByte(f[4])), Long.parseLong(f[5]),
                    Integer.parseInt(f[6]));
                return HEX.formatHex(serde.serialize(delete));
            }
            case "T": {
                boolean fromNone = f[2].equals("-");
                if (f[1].equals("s")) {
                    return Boolean.toString(RemoteLogSegmentState.isValidTransition(
                        fromNone ? null : RemoteLogSegmentState.forId(Byte.parseByte(f[2])),
                        RemoteLogSegmentState.forId(Byte.parseByte(f[3]))));
                }
                return Boolean.toString(RemotePartitionDeleteState.isValidTransition(
                    fromNone ? null : RemotePartitionDeleteState.forId(Byte.parseByte(f[2])),
                    RemotePartitionDeleteState.forId(Byte.parseByte(f[3]))));
            }
            default:
                throw new IllegalArgumentException("no such case: " + f[0]);
        }
    }

    public static void main(String[] args) throws Exception {
        RemoteLogMetadataSerde serde = new RemoteLogMetadataSerde();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            try {
                out.append(answer(serde, line.split(" ", -1)));
            } catch (RuntimeException e) {
                out.append("ERR ").append(e.getClass().getSimpleName());
            }
            out.append('\n');
        }
        System.out.print(out);
    }
}
