// Kafka's own RemoteLogMetadataCache (one partition's remote segments folded from their
// __remote_log_metadata events) driven by operations read from stdin, for the differential
// test of kafkalog's (tests/test_tiered_metadata_cache.py). Its methods are package-private,
// so they are called by reflection. Run as a single file:
//   java -cp <Kafka classpath> interop/RemoteLogMetadataCacheOracle.java < operations
// A blank line starts a new cache. One operation a line, fields separated by spaces; one
// answer a line ("ERR " and the exception's class where Kafka throws):
//   I                                   mark initialized -> ok
//   A <segment id> <start> <end> <epoch:offset,...> <txn index empty>
//                                       a copy started -> ok
//   U <segment id> <state id> <event ts> <broker>
//                                       an update -> ok
//   Q <epoch> <offset>                  the segment holding it -> its id, or -
//   X <epoch> <offset>                  the next segment with a transaction index -> id or -
//   H <epoch>                           the highest offset of the epoch copied -> it, or -
//   L <epoch>                           the epoch's segments -> id@start,... in Kafka's order
//   S                                   every segment -> id:state,... sorted by id

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.StringJoiner;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;

public class RemoteLogMetadataCacheOracle {
    static final TopicIdPartition TP =
        new TopicIdPartition(Uuid.fromString("3JPMkBTsTzGbV7ZVXmQGrg"), new TopicPartition("t", 0));
    static final String CACHE = "org.apache.kafka.server.log.remote.metadata.storage.RemoteLogMetadataCache";

    static Method method(Class<?> c, String name, Class<?>... types) throws Exception {
        Method m = c.getDeclaredMethod(name, types);
        m.setAccessible(true);
        return m;
    }

    static String id(Object metadata) {
        return ((RemoteLogSegmentMetadata) metadata).remoteLogSegmentId().id().toString();
    }

    public static void main(String[] args) throws Exception {
        Class<?> c = Class.forName(CACHE);
        Method init = method(c, "markInitialized");
        Method add = method(c, "addCopyInProgressSegment", RemoteLogSegmentMetadata.class);
        Method update = method(c, "updateRemoteLogSegmentMetadata", RemoteLogSegmentMetadataUpdate.class);
        Method find = method(c, "remoteLogSegmentMetadata", int.class, long.class);
        Method txn = method(c, "nextSegmentWithTxnIndex", int.class, long.class);
        Method highest = method(c, "highestOffsetForEpoch", int.class);
        Method list = method(c, "listRemoteLogSegments", int.class);
        Method all = method(c, "listAllRemoteLogSegments");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        Object cache = c.getDeclaredConstructor().newInstance();
        for (String line; (line = in.readLine()) != null; ) {
            if (line.isEmpty()) {
                cache = c.getDeclaredConstructor().newInstance();
                continue;
            }
            String[] f = line.split(" ");
            String answer;
            try {
                answer = switch (f[0]) {
                    case "I" -> { init.invoke(cache); yield "ok"; }
                    case "A" -> {
                        Map<Integer, Long> epochs = new HashMap<>();
                        for (String pair : f[4].split(",")) {
                            String[] eo = pair.split(":");
                            epochs.put(Integer.parseInt(eo[0]), Long.parseLong(eo[1]));
                        }
                        add.invoke(cache, new RemoteLogSegmentMetadata(
                            new RemoteLogSegmentId(TP, Uuid.fromString(f[1])), Long.parseLong(f[2]),
                            Long.parseLong(f[3]), -1L, 0, 0L, 100, Optional.empty(),
                            RemoteLogSegmentState.COPY_SEGMENT_STARTED, epochs, Boolean.parseBoolean(f[5])));
                        yield "ok";
                    }
                    case "U" -> {
                        update.invoke(cache, new RemoteLogSegmentMetadataUpdate(
                            new RemoteLogSegmentId(TP, Uuid.fromString(f[1])), Long.parseLong(f[3]),
                            Optional.empty(), RemoteLogSegmentState.forId(Byte.parseByte(f[2])),
                            Integer.parseInt(f[4])));
                        yield "ok";
                    }
                    case "Q", "X" -> {
                        Optional<?> found = (Optional<?>) (f[0].equals("Q") ? find : txn).invoke(
                            cache, Integer.parseInt(f[1]), Long.parseLong(f[2]));
                        yield found.map(RemoteLogMetadataCacheOracle::id).orElse("-");
                    }
                    case "H" -> {
                        Optional<?> found = (Optional<?>) highest.invoke(cache, Integer.parseInt(f[1]));
                        yield found.map(Object::toString).orElse("-");
                    }
                    case "L" -> {
                        StringJoiner j = new StringJoiner(",");
                        Iterator<?> it = (Iterator<?>) list.invoke(cache, Integer.parseInt(f[1]));
                        while (it.hasNext()) {
                            RemoteLogSegmentMetadata m = (RemoteLogSegmentMetadata) it.next();
                            j.add(id(m) + "@" + m.startOffset());
                        }
                        yield j.toString();
                    }
                    case "S" -> {
                        List<String> ids = new ArrayList<>();
                        Iterator<?> it = (Iterator<?>) all.invoke(cache);
                        while (it.hasNext()) {
                            RemoteLogSegmentMetadata m = (RemoteLogSegmentMetadata) it.next();
                            ids.add(id(m) + ":" + m.state().id());
                        }
                        ids.sort(null);
                        yield String.join(",", ids);
                    }
                    default -> throw new IllegalArgumentException("no such operation: " + f[0]);
                };
            } catch (InvocationTargetException e) {
                answer = "ERR " + e.getCause().getClass().getSimpleName();
            }
            out.append(answer).append('\n');
        }
        System.out.print(out);
    }
}
