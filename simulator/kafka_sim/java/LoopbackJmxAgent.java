import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.rmi.registry.LocateRegistry;
import java.rmi.server.RMIServerSocketFactory;
import java.util.HashMap;
import java.util.Map;
import javax.management.remote.JMXConnectorServer;
import javax.management.remote.JMXConnectorServerFactory;
import javax.management.remote.JMXServiceURL;
import javax.management.remote.rmi.RMIConnectorServer;

/**
 * A JMX connector bound to 127.0.0.1 only, for the test brokers.
 *
 * The JDK's own -Dcom.sun.management.jmxremote.* flags also open a local connector on every
 * address; this agent (-javaagent:jar=PORT) opens the RMI registry and the connector on one
 * loopback port and nothing else. JMX URL: service:jmx:rmi:///jndi/rmi://127.0.0.1:PORT/jmxrmi
 */
public final class LoopbackJmxAgent {
    private LoopbackJmxAgent() {}

    public static void premain(String args) throws Exception {
        int port = Integer.parseInt(args.trim());
        InetAddress loopback = InetAddress.getByName("127.0.0.1");
        RMIServerSocketFactory sockets = p -> new ServerSocket(p, 50, loopback);
        LocateRegistry.createRegistry(port, null, sockets);
        Map<String, Object> env = new HashMap<>();
        env.put(RMIConnectorServer.RMI_SERVER_SOCKET_FACTORY_ATTRIBUTE, sockets);
        JMXServiceURL url = new JMXServiceURL(
            "service:jmx:rmi://127.0.0.1:" + port + "/jndi/rmi://127.0.0.1:" + port + "/jmxrmi");
        JMXConnectorServer server = JMXConnectorServerFactory.newJMXConnectorServer(
            url, env, ManagementFactory.getPlatformMBeanServer());
        server.start();
    }
}
