import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's own Java producer, driven the way the real-broker tests need it.
 *
 * Modes:
 *   prepare BOOTSTRAP TOPIC TXN_ID        2PC producer: init (Enable2Pc), one record, flush,
 *                                         prepare, print "PREPARED pid epoch", then halt
 *                                         without ending the transaction (the external
 *                                         coordinator "decides later").
 *   init2pc BOOTSTRAP TXN_ID              2PC init only; prints "INIT_OK" or "INIT_FAILED <exception>".
 *   loop BOOTSTRAP TOPIC TXN_ID COUNT     plain transactional producer: COUNT transactions back to
 *                                         back, each committed; prints "TXN pid epoch" after each.
 *   open BOOTSTRAP TOPIC TXN_ID           plain transactional producer: one record, flush, print
 *                                         "OPEN pid epoch", halt with the transaction open.
 */
public final class TwoPhaseProducer {
    private TwoPhaseProducer() {}

    private static KafkaProducer<String, String> producer(String bootstrap, String txnId, boolean twoPhase) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", txnId);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("max.block.ms", "20000");
        p.put("request.timeout.ms", "20000");
        p.put("delivery.timeout.ms", "30000");
        if (twoPhase) {
            p.put("transaction.two.phase.commit.enable", "true");
        }
        return new KafkaProducer<>(p);
    }

    private static Object transactionManager(KafkaProducer<String, String> producer) throws Exception {
        Field f = KafkaProducer.class.getDeclaredField("transactionManager");
        f.setAccessible(true);
        return f.get(producer);
    }

    /** "pid epoch" of the producer's current ProducerIdAndEpoch (internal API, read reflectively). */
    private static String idAndEpoch(KafkaProducer<String, String> producer) throws Exception {
        Object tm = transactionManager(producer);
        Method m = tm.getClass().getDeclaredMethod("producerIdAndEpoch");
        m.setAccessible(true);
        Object pe = m.invoke(tm);
        Field pidField = pe.getClass().getDeclaredField("producerId");
        Field epochField = pe.getClass().getDeclaredField("epoch");
        pidField.setAccessible(true);
        epochField.setAccessible(true);
        long pid = pidField.getLong(pe);
        short epoch = epochField.getShort(pe);
        return pid + " " + epoch;
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String bootstrap = args[1];
        switch (mode) {
            case "init2pc": {
                KafkaProducer<String, String> p = producer(bootstrap, args[2], true);
                try {
                    p.initTransactions();
                    System.out.println("INIT_OK " + idAndEpoch(p));
                } catch (Exception e) {
                    System.out.println("INIT_FAILED " + e.getClass().getName() + " " + e.getMessage());
                }
                System.out.flush();
                Runtime.getRuntime().halt(0);
                break;
            }
            case "prepare": {
                KafkaProducer<String, String> p = producer(bootstrap, args[3], true);
                p.initTransactions();
                p.beginTransaction();
                p.send(new ProducerRecord<>(args[2], "k", "2pc")).get();
                p.flush();
                Object tm = transactionManager(p);
                tm.getClass().getMethod("prepareTransaction").invoke(tm);
                System.out.println("PREPARED " + idAndEpoch(p));
                System.out.flush();
                Runtime.getRuntime().halt(0);
                break;
            }
            case "open": {
                KafkaProducer<String, String> p = producer(bootstrap, args[3], false);
                p.initTransactions();
                p.beginTransaction();
                p.send(new ProducerRecord<>(args[2], "k", "open")).get();
                p.flush();
                System.out.println("OPEN " + idAndEpoch(p));
                System.out.flush();
                Runtime.getRuntime().halt(0);
                break;
            }
            case "loop": {
                int count = Integer.parseInt(args[4]);
                KafkaProducer<String, String> p = producer(bootstrap, args[3], false);
                p.initTransactions();
                for (int i = 0; i < count; i++) {
                    p.beginTransaction();
                    p.send(new ProducerRecord<>(args[2], "k", "v" + i)).get();
                    p.commitTransaction();
                    System.out.println("TXN " + idAndEpoch(p));
                    System.out.flush();
                }
                p.close();
                break;
            }
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
    }
}
