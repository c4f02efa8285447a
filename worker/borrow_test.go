package worker

import (
	"slices"
	"testing"
)

// The borrow table owes an owner one RefRemoved per reported borrow, none
// for a borrow let go before it was reported, and none for one passed on.
func TestBorrowTableOwesOneRefRemovedPerReport(t *testing.T) {
	var bt borrowTable
	bt.add("a", "O")
	bt.add("a", "O") // a second handle of the same object
	bt.add("b", "O")
	bt.add("c", "P")
	if _, owed := bt.release("b"); owed {
		t.Fatal("a borrow released before any report is owed to its owner")
	}
	got := bt.report("O")
	if !slices.Equal(got, []string{"a"}) {
		t.Fatalf("report to O: %v, want [a]", got)
	}
	if again := bt.report("O"); len(again) != 0 {
		t.Fatalf("a second report repeats %v", again)
	}
	if _, owed := bt.release("a"); owed {
		t.Fatal("owed while a handle is left")
	}
	if owner, owed := bt.release("a"); !owed || owner != "O" {
		t.Fatalf("last handle of a reported borrow: owner %q, owed %v", owner, owed)
	}
	bt.escape("c", "P")
	if got := bt.report("P"); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("report to P: %v, want [c]", got)
	}
	if _, owed := bt.release("c"); owed {
		t.Fatal("a borrow passed on is never given back")
	}
}
