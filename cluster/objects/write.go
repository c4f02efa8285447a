package objects

import (
	"context"
	"errors"
	"fmt"

	"github.com/nodeup/nodeup/objstore"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// Write copies a chunk into an object its caller created and has not
// sealed (Obj.Write): how a driver that cannot map this node's arena (on
// another machine) fills its large objects. A chunk over
// wire.MaxWriteChunk, outside the object or into a sealed or absent one is
// bad_input or not_found, naming the object.
func (o *Service) Write(ctx context.Context, r *wire.ObjectWriteRequest) (*wire.Empty, error) {
	if len(r.Data) > wire.MaxWriteChunk {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("write of %d bytes to object %s: at most %d per request", len(r.Data), r.Key, wire.MaxWriteChunk)}
	}
	if err := o.store.WriteAt(r.Key, r.Data, r.Offset); err != nil {
		code := wire.CodeBadInput
		if errors.Is(err, objstore.ErrNotFound) {
			code = wire.CodeNotFound
		}
		return nil, &rpc.Error{Code: code, Message: fmt.Sprintf("node %s: %v", o.nodeName, err)}
	}
	return &wire.Empty{}, nil
}
