package objstore

import "errors"

// Sentinel errors. Methods wrap them with the object ID and sizes, so match
// them with errors.Is.
var (
	// ErrExists: Create or Put was given an ID already present (sealed or not).
	ErrExists = errors.New("object already exists")
	// ErrNotFound: no object with that ID, or (where a sealed object is
	// required) the object is not sealed yet.
	ErrNotFound = errors.New("object not found")
	// ErrFull: no contiguous free range is large enough, even after evicting
	// every unpinned secondary copy that could help.
	ErrFull = errors.New("object store full")
	// ErrTooLarge: the requested size exceeds the store's whole capacity, so
	// no amount of freeing could make it fit.
	ErrTooLarge = errors.New("object larger than the object store")
	// ErrClosed: the Store or Mapping was closed.
	ErrClosed = errors.New("object store closed")
	// ErrSealed: Seal or Abort was called on an object already sealed.
	ErrSealed = errors.New("object already sealed")
	// ErrInvalid: a malformed argument (empty or over-long ID, negative size
	// or offset, out-of-range Location).
	ErrInvalid = errors.New("invalid argument")
)
