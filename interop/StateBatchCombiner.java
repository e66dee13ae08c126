// Kafka's own PersisterStateBatchCombiner (the share coordinator's merge of a share-partition's
// state batches) over cases read from stdin, for the differential test of kafkalog's
// (tests/test_share_state.py). Run as a single file:
//   java -cp <Kafka classpath> interop/StateBatchCombiner.java < cases
// A case is one line: START|BATCHES_SO_FAR|NEW_BATCHES, each batches field a ";"-separated list
// of "first,last,state,count" (possibly empty). Prints the combined batches of each case, one
// line per case, in the same form.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.StringJoiner;
import org.apache.kafka.coordinator.share.PersisterStateBatchCombiner;
import org.apache.kafka.server.share.persister.PersisterStateBatch;

public class StateBatchCombiner {
    static List<PersisterStateBatch> parse(String field) {
        List<PersisterStateBatch> out = new ArrayList<>();
        if (field.isEmpty()) return out;
        for (String b : field.split(";")) {
            String[] p = b.split(",");
            out.add(new PersisterStateBatch(Long.parseLong(p[0]), Long.parseLong(p[1]),
                Byte.parseByte(p[2]), Short.parseShort(p[3])));
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.split("\\|", -1);
            List<PersisterStateBatch> combined = new PersisterStateBatchCombiner(
                parse(f[1]), parse(f[2]), Long.parseLong(f[0])).combineStateBatches();
            StringJoiner j = new StringJoiner(";");
            for (PersisterStateBatch b : combined) {
                j.add(b.firstOffset() + "," + b.lastOffset() + "," + b.deliveryState() + "," + b.deliveryCount());
            }
            out.append(j).append('\n');
        }
        System.out.print(out);
    }
}
