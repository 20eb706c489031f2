"""Network attempts against today's deny-all egress. NET holds the targets
the Go side set up (network_test.go); every attempt also runs the probes
against the sandbox's own loopback, where they must get through."""

import socket
import struct

from rt import NET, control, expect, local_tcp_server, net_controls, ping, probe_tcp, send_udp, tryio


def tcp(R, targets):
    R["res"] = probe_tcp(targets)
    net_controls(R)


def host_spaced(R):
    tcp(R, [NET["host"] + ":" + NET["spaced"]])


def host_listener(R):
    tcp(R, [NET["host"] + ":" + NET["tcp"]])


def host_ports(R):
    tcp(R, [NET["host"] + ":" + str(p) for p in (22, 80, 111, 443, 2375, 2379, 6443, 10250, 49983)])


def host_other_ifaces(R):
    tcp(R, [a + ":" + p for a in NET["hostAddrs"] for p in (NET["spaced"], NET["tcp"])])


def host_loopback(R):
    # A listener of the sandbox's own at spaced's port on 127.0.0.1: what
    # answers there is the sandbox, not spaced.
    local_tcp_server("127.0.0.1", int(NET["spaced"]), b"SANDBOX")
    R["res"] = probe_tcp(["127.0.0.2:" + NET["spaced"], "localhost:" + NET["tcp"]])
    s = socket.create_connection(("127.0.0.1", int(NET["spaced"])), timeout=2)
    R["own"] = s.recv(16).decode("latin-1")
    s.close()
    net_controls(R)


def neighbour_agent(R):
    tcp(R, [NET["neighbour"] + ":49983"])


def neighbour_ports(R):
    tcp(R, [NET["neighbour"] + ":" + str(p) for p in (8000, 22, 80, 443, 8080)])


def neighbour_desktop(R):
    # A desktop's X11 (:0, :1), VNC (the SDK's, the console viewer's),
    # noVNC, DevTools and computer-use ports; stand-ins listen there.
    tcp(R, [NET["neighbour"] + ":" + str(p) for p in (6000, 6001, 5900, 5910, 6080, 9222, 49990)])


def other_slots(R):
    tcp(R, ["10.245.0.%d:49983" % i for i in range(1, 64) if "10.245.0.%d" % i != NET["self"]])


def metadata(R):
    tcp(R, ["169.254.169.254:" + NET["ns"], "169.254.169.254:80"])


def cgnat(R):
    tcp(R, ["100.64.0.1:" + NET["ns"]])


def internet(R):
    tcp(R, ["198.51.100.10:" + NET["ns"], "198.51.100.10:80"])


def ipv6(R):
    tcp(R, ["[" + a + "]:" + NET["tcp"] for a in NET["hostAddrs6"]] +
        ["[2001:db8:245::10]:" + NET["ns"], "[::1]:" + NET["spaced"]])


def icmp(R):
    R["res"] = ping([NET["host"], NET["neighbour"], "169.254.169.254", "198.51.100.10"] + NET["hostAddrs"])
    net_controls(R)


def udp(R, targets):
    R["res"] = send_udp(targets)
    net_controls(R)


def udp_host(R):
    udp(R, [a + ":" + NET["udp"] for a in [NET["host"]] + NET["hostAddrs"]] +
        ["255.255.255.255:" + NET["udp"], NET["bcast"] + ":" + NET["udp"]])


def udp_namespace(R):
    udp(R, [a + ":" + NET["nsudp"] for a in ("169.254.169.254", "100.64.0.1", "198.51.100.10")])


def udp_neighbour(R):
    udp(R, [NET["neighbour"] + ":" + p for p in ("53", "49983", "8000")])


def udp_dns(R):
    """Asks for example.com at port 53 of three addresses, over UDP and
    TCP; records each answer's rcode and answer count."""
    q = struct.pack("!HHHHHH", 1, 0x100, 1, 0, 0, 0) + b"\x07example\x03com\x00\x00\x01\x00\x01"
    R["res"] = {}
    for a in (NET["host"], "169.254.169.254", "198.51.100.10"):
        for proto in ("udp", "tcp"):
            k = proto + ":" + a
            try:
                if proto == "udp":
                    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    s.settimeout(1)
                    s.sendto(q, (a, 53))
                    resp = s.recvfrom(512)[0]
                else:
                    s = socket.create_connection((a, 53), timeout=1)
                    s.sendall(struct.pack("!H", len(q)) + q)
                    resp = s.recv(514)[2:]
                s.close()
                R["res"][k] = "rcode=%d an=%d" % (resp[3] & 15, struct.unpack("!H", resp[6:8])[0])
            except OSError as e:
                R["res"][k] = "error:%s" % e
    control(R, "gateway-answers", expect(R["res"]["udp:" + NET["host"]].startswith("rcode="),
                                         "no DNS server answered at the host end of the veth"))


def bind_err(addr, opt=None):
    s = socket.socket()
    try:
        if opt:
            e = tryio(s.setsockopt, socket.SOL_IP, opt, 1)[1]
            if e:
                return "setsockopt:" + e
        return tryio(s.bind, (addr, 0))[1]
    finally:
        s.close()


def spoof_source(R):
    R["errs"] = {a: bind_err(a) for a in (NET["neighbour"], NET["host"], "169.254.169.254")}
    control(R, "own-address", bind_err(NET["self"]))


def ip_transparent(R):
    R["errs"] = {n: bind_err(NET["neighbour"], opt) for n, opt in (("transparent", 19), ("freebind", 15))}
    control(R, "own-address", bind_err(NET["self"], 19))
    s = socket.socket()
    s.settimeout(1)
    e = tryio(s.setsockopt, socket.SOL_SOCKET, 25, b"lo")[1]
    if not e:
        e = tryio(s.connect, (NET["host"], int(NET["tcp"])))[1] or "connected"
    s.close()
    R["bindtodevice"] = e


def route_table(R):
    with open("/proc/net/route") as f:
        routes = f.read()
    with open("/proc/net/arp") as f:
        arp = f.read()
    R["routes"] = routes + arp
    rows = [line.split() for line in R["routes"].splitlines()[1:] if line.split()]
    R["other"] = [r for r in rows if r[0] not in ("eth0", "lo", "IP")]
    control(R, "eth0", expect(any(r[0] == "eth0" for r in rows), "no route through eth0 was read"))
