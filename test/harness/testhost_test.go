package harness

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
)

// netnsOf answers the network namespace a /proc ns link names.
func netnsOf(t *testing.T, link string) string {
	t.Helper()
	ns, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestDoGoesHome: fn runs in the namespace, and afterwards no thread of
// the binary is left in it. The runtime runs goroutines on the main
// thread too; a Do left there in the namespace made /proc/self name it
// from then on (a few Do calls were enough), and NewTestHost, which then
// judged its holder's namespace against it, moved a link before the
// holder had its namespace ("Cannot find device").
func TestDoGoesHome(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces")
	h, err := NewTestHost(TestHostOptions{Prefix: "thd"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	self, theirs := netnsOf(t, "/proc/self/ns/net"), netnsOf(t, h.Path)
	if self == theirs {
		t.Fatalf("the test host's namespace is ours: %s", self)
	}
	for i := range 200 {
		// A pause, so that idle threads (the main one among them) park
		// and the next Do's goroutine may run on any of them.
		time.Sleep(time.Millisecond)
		var in string
		if err := h.Do(func() error { in = netnsOf(t, "/proc/thread-self/ns/net"); return nil }); err != nil {
			t.Fatal(err)
		}
		if in != theirs {
			t.Fatalf("Do %d ran in %s, not the test host's %s", i, in, theirs)
		}
		if now := netnsOf(t, "/proc/self/ns/net"); now != self {
			t.Fatalf("after Do %d the main thread is in %s, was %s", i, now, self)
		}
	}
}

// TestNewTestHostWaitsForItsNamespace: a holder slow to make its
// namespace (as under load) still gets the link: NewTestHost waits for
// the holder's word, and the link ends up in the namespace, not here.
func TestNewTestHostWaitsForItsNamespace(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces")
	saved := holderCmd
	t.Cleanup(func() { holderCmd = saved })
	holderCmd = []string{"sh", "-c", `sleep 1; exec "$@"`, "sh"}
	holderCmd = append(holderCmd, saved...)
	h, err := NewTestHost(TestHostOptions{Prefix: "thw", HostAddrs: []string{"192.0.2.1/30"}, Addrs: []string{"192.0.2.2/30"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if netnsOf(t, "/proc/self/ns/net") == netnsOf(t, h.Path) {
		t.Fatal("the test host's namespace is ours")
	}
	nsLink := "thwn" + h.HostLink[len("thwh"):]
	if _, err := os.Stat("/sys/class/net/" + nsLink); err == nil {
		t.Errorf("the namespace's end %s is on the host", nsLink)
	}
	if out, err := exec.Command("nsenter", "-t", h.pid, "-n", "ip", "-o", "addr", "show", "dev", nsLink).CombinedOutput(); err != nil {
		t.Errorf("the namespace's end in the namespace: %v: %s", err, out)
	}
}
