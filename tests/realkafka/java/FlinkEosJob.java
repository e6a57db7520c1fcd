import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * A small Flink job with KafkaSink and DeliveryGuarantee.EXACTLY_ONCE, run in a local
 * MiniCluster (this JVM), the way the real-client tests and the client soak run it: a number
 * sequence, slowed down, written to TOPIC in transactions that span a checkpoint (one every
 * CHECKPOINT_MS), with transaction.timeout.ms 15 min as users raise it.
 *
 *   FlinkEosJob BOOTSTRAP TOPIC TRANSACTIONAL_ID_PREFIX CHECKPOINT_DIR CHECKPOINT_MS [RESTORE_FROM]
 *
 * Prints "STARTED <job id>", then "CHECKPOINT <id>" each time subtask 0 learns that a checkpoint
 * completed. Checkpoints are kept on cancellation (RESTORE_FROM: a chk-N folder to start from).
 * A file CHECKPOINT_DIR/cancel makes it cancel the job, print "CANCELLED" and exit; SIGKILL is
 * the other fault.
 */
public final class FlinkEosJob {
    private FlinkEosJob() {}

    /** Slows the sequence down and reports completed checkpoints. */
    static final class Throttle extends RichMapFunction<Long, String> implements CheckpointListener {
        @Override
        public String map(Long value) throws Exception {
            Thread.sleep(5);
            return Long.toString(value);
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            if (getRuntimeContext().getTaskInfo().getIndexOfThisSubtask() == 0) {
                System.out.println("CHECKPOINT " + checkpointId);
                System.out.flush();
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String prefix = args[2];
        Path checkpoints = Paths.get(args[3]).toAbsolutePath();
        long checkpointMs = Long.parseLong(args[4]);

        Configuration conf = new Configuration();
        conf.setString("state.checkpoints.dir", checkpoints.toUri().toString());
        conf.setString("execution.checkpointing.externalized-checkpoint-retention",
                "RETAIN_ON_CANCELLATION");
        conf.setString("rest.bind-port", "0");
        if (args.length > 5) {
            conf.setString("execution.savepoint.path", Paths.get(args[5]).toUri().toString());
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(2);
        env.enableCheckpointing(checkpointMs);

        KafkaSink<String> sink = KafkaSink.<String>builder()
                .setBootstrapServers(bootstrap)
                .setRecordSerializer(KafkaRecordSerializationSchema.builder()
                        .setTopic(topic)
                        .setValueSerializationSchema(new SimpleStringSchema())
                        .build())
                .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
                .setTransactionalIdPrefix(prefix)
                .setProperty("transaction.timeout.ms", "900000")
                .build();
        env.fromSequence(0, Long.MAX_VALUE).map(new Throttle()).sinkTo(sink);

        JobClient job = env.executeAsync("flink-eos");
        System.out.println("STARTED " + job.getJobID());
        System.out.flush();
        Path cancel = checkpoints.resolve("cancel");
        while (true) {
            if (Files.exists(cancel)) {
                job.cancel().get();
                try {
                    // Ends exceptionally for a cancelled job (or once the MiniCluster that ran
                    // it has shut down): either way the job is over.
                    job.getJobExecutionResult().get();
                } catch (Exception over) {
                    System.err.println("job ended: " + over);
                }
                System.out.println("CANCELLED");
                System.out.flush();
                System.exit(0);
            }
            Thread.sleep(100);
        }
    }
}
