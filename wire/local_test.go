package wire

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// LocalSocketFor finds each of several nodes on this machine by its
// address, and nothing for an address no node records, a record naming
// another address, or a socket that is gone.
func TestLocalSocketForFindsEveryLocalNode(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	dir := t.TempDir()
	record := func(addr, sock string) {
		t.Helper()
		p := LocalNodeFile(addr)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(addr+"\n"+sock+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	listen := func(name string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return "unix://" + path
	}
	a, b := listen("a.sock"), listen("b.sock")
	record("127.0.0.1:7370", a)
	record("127.0.0.1:7371", b)
	record("[::1]:7372", a)
	for addr, want := range map[string]string{"127.0.0.1:7370": a, "127.0.0.1:7371": b, "[::1]:7372": a, "127.0.0.1:7373": ""} {
		if got := LocalSocketFor(addr); got != want {
			t.Errorf("LocalSocketFor(%q) = %q, want %q", addr, got, want)
		}
	}
	// A record whose first line names another address (two addresses
	// that map to one file name) is not taken.
	if err := os.WriteFile(LocalNodeFile("127.0.0.1:7374"), []byte("127.0.0.1_7374\n"+a+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := LocalSocketFor("127.0.0.1:7374"); got != "" {
		t.Errorf("a record of another address: %q, want none", got)
	}
	// A socket that is gone (its node died) is not offered.
	record("127.0.0.1:7375", "unix://"+filepath.Join(dir, "gone.sock"))
	if got := LocalSocketFor("127.0.0.1:7375"); got != "" {
		t.Errorf("a gone socket: %q, want none", got)
	}
	if got := LocalSocket(""); got != "" {
		t.Errorf("LocalSocket of no address: %q", got)
	}
}
