package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// ProtocolVersion is the version of the helper protocol; the node and the
// helper exchange it in their hello frames and the node refuses a helper
// that speaks another (the helper is embedded in the same binary, so a
// mismatch means a stale extracted file).
const ProtocolVersion = 1

// MaxFrameSize bounds one frame's msgpack body in bytes; a longer length
// prefix is an error (never an allocation of that size).
const MaxFrameSize = 16 << 20

// FrameType says what a Frame carries.
type FrameType string

// Frame types. The node writes Hello on the helper's stdin, then nothing
// until it closes stdin, which tells the helper to exit. The helper writes
// on its stdout: Hello, then Devices once, then Samples every interval
// (an empty Samples frame is the heartbeat when there is nothing to report),
// and Health whenever a device's health changes. Error with Fatal set means
// the helper cannot work on this machine (NVML missing or failing to
// initialize) and is about to exit with status 3; the node then stops
// restarting it and falls back to nvidia-smi.
const (
	FrameHello   FrameType = "hello"
	FrameDevices FrameType = "devices"
	FrameSamples FrameType = "samples"
	FrameHealth  FrameType = "health"
	FrameError   FrameType = "error"
)

// ExitUnavailable is the helper's exit status after a fatal Error frame:
// NVML cannot be used on this machine.
const ExitUnavailable = 3

// Frame is one message between the node and the helper. Only the fields of
// its Type are set.
type Frame struct {
	// Type says which of the fields below are set.
	Type FrameType `msgpack:"t"`
	// Version is the sender's ProtocolVersion (Hello).
	Version int `msgpack:"v,omitempty"`
	// IntervalMS is the telemetry interval in milliseconds (node's Hello).
	IntervalMS int64 `msgpack:"interval_ms,omitempty"`
	// Driver is the NVIDIA driver version (helper's Hello), "550.54.15".
	Driver string `msgpack:"driver,omitempty"`
	// NVML is the NVML library version (helper's Hello), "12.550.54.15".
	NVML string `msgpack:"nvml,omitempty"`
	// Devices is every device NVML found, in index order (Devices).
	Devices []Device `msgpack:"devices,omitempty"`
	// Samples holds one reading per readable device (Samples).
	Samples []Sample `msgpack:"samples,omitempty"`
	// Health holds device health changes (Health).
	Health []HealthEvent `msgpack:"health,omitempty"`
	// Error is a human-readable error (Error).
	Error string `msgpack:"error,omitempty"`
	// Fatal marks Error terminal: NVML cannot work here, the helper exits
	// with ExitUnavailable and must not be restarted.
	Fatal bool `msgpack:"fatal,omitempty"`
}

// ErrFrameTooLarge is returned by ReadFrame for a length prefix above
// MaxFrameSize, and by WriteFrame for a frame that would exceed it.
var ErrFrameTooLarge = errors.New("gpu helper frame too large")

// WriteFrame writes f as a 4-byte big-endian length followed by its msgpack
// encoding, in one Write call.
func WriteFrame(w io.Writer, f *Frame) error {
	body, err := msgpack.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode %s frame: %w", f.Type, err)
	}
	if len(body) > MaxFrameSize {
		return fmt.Errorf("%w: %s frame of %d bytes", ErrFrameTooLarge, f.Type, len(body))
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads one frame written by WriteFrame. It returns io.EOF at a
// clean end of stream (no bytes of a next frame), io.ErrUnexpectedEOF for a
// truncated frame, ErrFrameTooLarge for a length above MaxFrameSize, and a
// decoding error for a body that is not a Frame.
func ReadFrame(r io.Reader) (*Frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameSize {
		return nil, fmt.Errorf("%w: length prefix %d, at most %d", ErrFrameTooLarge, n, MaxFrameSize)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	f := new(Frame)
	if err := msgpack.Unmarshal(body, f); err != nil {
		return nil, fmt.Errorf("decode gpu helper frame: %w", err)
	}
	return f, nil
}
