package cli

import (
	"strings"
	"testing"
)

func TestTaskListRequestFilters(t *testing.T) {
	req, err := taskListRequest([]string{"job_id=j1", "state=running", "name=f", "node_name=n1", "actor_id=a1"})
	if err != nil {
		t.Fatal(err)
	}
	if req.JobID != "j1" || req.State != "RUNNING" || req.Name != "f" || req.Node != "n1" || req.ActorID != "a1" {
		t.Fatalf("parsed %+v", req)
	}
	for _, c := range []struct{ filters []string }{
		{[]string{"nope=1"}}, {[]string{"state"}}, {[]string{"state=DONE"}}, {[]string{"name=a", "name=b"}},
		{[]string{"node_id=x", "node_name=y"}}, {[]string{"job_id=../x"}},
	} {
		if _, err := taskListRequest(c.filters); err == nil {
			t.Errorf("--filter %s: no error", strings.Join(c.filters, " --filter "))
		}
	}
}
