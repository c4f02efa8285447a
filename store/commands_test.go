package store

import (
	"errors"
	"reflect"
	"testing"

	"github.com/nodeup/nodeup/sched"
)

func TestMessageTypeNumbersAreStable(t *testing.T) {
	t.Parallel()
	// These values are persisted in Raft logs: they must never change.
	want := map[MessageType]uint8{
		ClusterInitType:         0,
		NodeRegisterType:        1,
		NodeStatusType:          2,
		NodeDeregisterType:      3,
		KVSetType:               4,
		KVDeleteType:            5,
		ActorRegisterType:       6,
		ActorUpdateType:         7,
		PlacementGroupWriteType: 8,
		TokenCreateType:         9,
		TokenRevokeType:         10,
		JobWriteType:            11,
		JobDeleteType:           12,
	}
	for mt, n := range want {
		if uint8(mt) != n {
			t.Errorf("%v = %d, want %d", mt, uint8(mt), n)
		}
	}
	if got := MessageType(200).String(); got != "MessageType(200)" {
		t.Errorf("unknown String() = %q", got)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mt  MessageType
		req any
	}{
		{ClusterInitType, &ClusterInitRequest{Meta: ClusterMeta{ID: "c", Name: "n", CreatedAt: 5}}},
		{NodeRegisterType, &NodeRegisterRequest{Node: testNode("n1")}},
		{NodeStatusType, &NodeStatusRequest{NodeID: "n1", Status: NodeDead, At: 9}},
		{NodeDeregisterType, &NodeDeregisterRequest{NodeID: "n1"}},
		{KVSetType, &KVSetRequest{Key: "k", Value: []byte("v"), CAS: true, Index: 3}},
		{KVDeleteType, &KVDeleteRequest{Key: "k"}},
		{ActorRegisterType, &ActorRegisterRequest{Actor: testActor("a1", "ns", "c"), GetIfExists: true}},
		{ActorUpdateType, &ActorUpdateRequest{Actor: testActor("a1", "ns", "c")}},
		{PlacementGroupWriteType, &PlacementGroupWriteRequest{Ops: []PlacementGroupOp{
			{Kind: PGOpCreate, Group: testPG("aaaaaaaa", "a", sched.StrictSpread, cpus(1), cpus(2))},
			{Kind: PGOpLose, ID: "aaaaaaaa", Nodes: []string{"n2"}, At: 7}}}},
	}
	for _, c := range cases {
		for _, req := range []any{c.req, reflect.ValueOf(c.req).Elem().Interface()} {
			data, err := Encode(c.mt, req)
			if err != nil {
				t.Fatalf("Encode(%v, %T): %v", c.mt, req, err)
			}
			if data[0] != byte(c.mt) {
				t.Fatalf("type byte = %d, want %d", data[0], c.mt)
			}
			mt, got, err := decode(data)
			if err != nil {
				t.Fatalf("decode(%v): %v", c.mt, err)
			}
			if mt != c.mt || !reflect.DeepEqual(got, c.req) {
				t.Fatalf("decode(%v) = %v %+v, want %+v", c.mt, mt, got, c.req)
			}
		}
	}
}

func TestEncodeRejectsMismatch(t *testing.T) {
	t.Parallel()
	if _, err := Encode(KVSetType, &KVDeleteRequest{Key: "k"}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("mismatched request: err = %v", err)
	}
	if _, err := Encode(KVSetType, (*KVSetRequest)(nil)); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("nil request: err = %v", err)
	}
	if _, err := Encode(KVSetType, nil); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("untyped nil request: err = %v", err)
	}
	if _, err := Encode(MessageType(99), &KVSetRequest{}); !errors.Is(err, ErrUnknownMessageType) {
		t.Errorf("unknown type: err = %v", err)
	}
}

func TestDecodeRejectsBadData(t *testing.T) {
	t.Parallel()
	good, err := Encode(NodeStatusType, NodeStatusRequest{NodeID: "n1", Status: NodeDead})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		data []byte
		want error
	}{
		"nil":          {nil, ErrMalformed},
		"type only":    {[]byte{byte(KVSetType)}, ErrMalformed},
		"unknown type": {[]byte{250, 0x80}, ErrUnknownMessageType},
		"truncated":    {good[:len(good)-3], ErrMalformed},
		"trailing":     {append(append([]byte{}, good...), 0x01), ErrMalformed},
		"wrong shape":  {[]byte{byte(NodeStatusType), 0x81, 0xa6, 'S', 't', 'a', 't', 'u', 's', 0x05}, ErrMalformed},
		"garbage":      {[]byte{byte(KVSetType), 0xc1, 0xff, 0x00}, ErrMalformed},
	}
	for name, c := range cases {
		if _, _, err := decode(c.data); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
	}
}
