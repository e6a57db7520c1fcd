import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;

/**
 * A small Kafka Streams application with processing.guarantee=exactly_once_v2, the way the
 * real-client tests and the client soak run it: INPUT -> mapValues -> OUTPUT, stateless, so a
 * new instance gets a new process id (and new transactional ids).
 *
 *   StreamsEosApp BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR THREADS [COMMIT_INTERVAL_MS]
 *
 * (commit.interval.ms: Streams' default under exactly-once, 100 ms, unless given.)
 * Prints "STATE <new state>" on every state change and, every second, "COMMITS <n>": the
 * transactions its threads committed so far (Streams' commit-total metrics summed, a replaced
 * thread's included; flushed: the parent reads them). A thread that dies is replaced (its
 * successor takes the next free thread index). SIGTERM closes it cleanly; SIGKILL is the fault.
 */
public final class StreamsEosApp {
    private StreamsEosApp() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String applicationId = args[1];
        String input = args[2];
        String output = args[3];
        String stateDir = args[4];
        int threads = Integer.parseInt(args[5]);
        String commitIntervalMs = args.length > 6 ? args[6] : null;

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArray().getClass());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArray().getClass());
        // A killed instance's partitions move to the others after 6 s, not the default 45 s.
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        if (commitIntervalMs != null) {
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(commitIntervalMs));
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.<byte[], byte[]>stream(input).mapValues(v -> v).to(output);

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            System.out.flush();
        });
        // A stream thread that meets an error it cannot recover from (a commit the coordinator
        // refused while the broker restarted) is replaced, as production applications do,
        // rather than taking the whole instance down.
        streams.setUncaughtExceptionHandler(e -> StreamThreadExceptionResponse.REPLACE_THREAD);
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(20));
            closed.countDown();
        }));
        streams.start();
        // Per thread, the last commit-total seen: a replaced thread's count is kept in the sum.
        Map<String, Long> lastByThread = new HashMap<>();
        long commits = 0;
        while (!closed.await(1, java.util.concurrent.TimeUnit.SECONDS)) {
            for (var metric : streams.metrics().entrySet()) {
                if (metric.getKey().name().equals("commit-total")
                        && metric.getKey().group().equals("stream-thread-metrics")) {
                    String thread = metric.getKey().tags().getOrDefault("thread-id", "");
                    long now = ((Number) metric.getValue().metricValue()).longValue();
                    commits += Math.max(0, now - lastByThread.getOrDefault(thread, 0L));
                    lastByThread.put(thread, now);
                }
            }
            System.out.println("COMMITS " + commits);
            System.out.flush();
        }
    }
}
