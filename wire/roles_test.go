package wire

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/internal/pki"
)

// docs/protocol.md's role table lists every method of MethodRoles under
// its role, and nothing else; every role in the tables is a real one, and
// docs/cli.md documents every HTTP endpoint.
func TestRoleTableMatchesDocs(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(open|read|submit|join|admin)`[^|]* \\| (.+) \\|$")
	documented := map[string]pki.Role{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		for _, method := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[2], -1) {
			documented[method[1]] = pki.Role(m[1])
		}
	}
	for method, role := range MethodRoles {
		if _, err := pki.ParseRole(string(role)); err != nil && role != RoleOpen {
			t.Errorf("MethodRoles[%s]: %v", method, err)
		}
		if documented[method] != role {
			t.Errorf("docs/protocol.md lists %s under role %q, MethodRoles says %q", method, documented[method], role)
		}
	}
	for method := range documented {
		if _, ok := MethodRoles[method]; !ok {
			t.Errorf("docs/protocol.md lists %s, which MethodRoles does not have", method)
		}
	}
	cli, err := os.ReadFile("../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	for pattern, role := range HTTPRoles {
		if role != "" {
			if _, err := pki.ParseRole(string(role)); err != nil && role != RoleOpen {
				t.Errorf("HTTPRoles[%s]: %v", pattern, err)
			}
		}
		if _, path, _ := strings.Cut(pattern, " "); !strings.Contains(string(cli), "`"+path+"`") {
			t.Errorf("docs/cli.md does not document HTTP endpoint %s", path)
		}
	}
}

// GrantsOf agrees with pki.Role.Allows for every pair of roles.
func TestGrantsAgreeWithAllows(t *testing.T) {
	roles := []pki.Role{pki.RoleRead, pki.RoleSubmit, pki.RoleJoin, pki.RoleAdmin}
	for _, have := range roles {
		for _, need := range roles {
			got := GrantsOf(have)&roleBit(need) != 0
			if got != have.Allows(need) {
				t.Errorf("role %s needing %s: grants say %v, Allows says %v", have, need, got, have.Allows(need))
			}
		}
	}
	if GrantsOf("bogus") != GrantOpen {
		t.Error("an unknown role holds more than the open methods")
	}
	for _, have := range append(roles, "bogus") {
		if GrantsOf(have)&GrantOpen == 0 {
			t.Errorf("role %s may not call the open methods", have)
		}
	}
	for m, r := range MethodRoles {
		if r == RoleOpen && m != MethodHello && m != MethodNodeJoin {
			t.Errorf("%s is open to anonymous callers; only Cluster.Hello and Node.Join are", m)
		}
	}
	if _, ok := MethodRole("KV.Set" + LeaderSuffix); !ok {
		t.Error("the leader-only variant of KV.Set has no role")
	}
}
