package gpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"
)

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Unix(1700000000, 123456789).UTC()
	frames := []*Frame{
		{Type: FrameHello, Version: ProtocolVersion, IntervalMS: 5000},
		{Type: FrameHello, Version: ProtocolVersion, Driver: "550.54.15", NVML: "12.550.54.15"},
		{Type: FrameDevices, Devices: testDevices(2, 40*gib)},
		{Type: FrameSamples, Samples: []Sample{{Index: 1, UUID: "GPU-b", At: at, UtilizationPercent: 97, MemoryUsedBytes: 5 * gib, MemoryTotalBytes: 40 * gib, TemperatureC: 64, PowerWatts: 311.5, Processes: []Process{{PID: 42, UsedMemoryBytes: gib}}}}},
		{Type: FrameHealth, Health: []HealthEvent{{Index: 3, UUID: "GPU-d", Reason: "Xid 79 (critical)", Xid: 79, At: at}}},
		{Type: FrameError, Error: "NVML: Driver Not Loaded", Fatal: true},
	}
	var buf bytes.Buffer
	for _, f := range frames {
		if err := WriteFrame(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range frames {
		got, err := ReadFrame(&buf)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got.Samples {
			got.Samples[i].At = got.Samples[i].At.UTC()
		}
		for i := range got.Health {
			got.Health[i].At = got.Health[i].At.UTC()
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}
	if _, err := ReadFrame(&buf); err != io.EOF {
		t.Errorf("at end: %v, want io.EOF", err)
	}
}

func TestReadFrameBad(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	_ = WriteFrame(&buf, &Frame{Type: FrameHello, Version: 1})
	whole := buf.Bytes()
	if _, err := ReadFrame(bytes.NewReader(whole[:len(whole)-1])); err != io.ErrUnexpectedEOF {
		t.Errorf("truncated: %v", err)
	}
	huge := binary.BigEndian.AppendUint32(nil, MaxFrameSize+1)
	if _, err := ReadFrame(bytes.NewReader(huge)); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("huge: %v", err)
	}
	junk := append(binary.BigEndian.AppendUint32(nil, 3), 0xc1, 0xc1, 0xc1)
	if _, err := ReadFrame(bytes.NewReader(junk)); err == nil {
		t.Error("junk body accepted")
	}
}

func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	_ = WriteFrame(&buf, &Frame{Type: FrameDevices, Devices: testDevices(1, gib)})
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			if _, err := ReadFrame(r); err != nil {
				return
			}
		}
	})
}
