package sched

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func TestParseQuantityGood(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Quantity
	}{
		{"0", 0},
		{"-0", 0},
		{"-0.000", 0},
		{"2", 20000},
		{"0.5", 5000},
		{"0.1", 1000},
		{"1.25", 12500},
		{"0.0001", 1},
		{"1.2345", 12345},
		{"0.50000", 5000},
		{"007", 70000},
		{"16000000000", 16000000000 * Unit},
		{"922337203685477.5807", MaxQuantity},
		{"000000000000000000000000001", Unit},
	} {
		got, err := ParseQuantity(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseQuantity(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseQuantityBad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, reason string }{
		{"", "empty"},
		{"-1", "must not be negative"},
		{"-0.0001", "must not be negative"},
		{"+1", "'+'"},
		{"NaN", "finite"},
		{"inf", "finite"},
		{"-Inf", "finite"},
		{"+infinity", "finite"},
		{"abc", "non-negative decimal"},
		{"1x", "non-negative decimal"},
		{"1,5", "non-negative decimal"},
		{" 1", "non-negative decimal"},
		{"1.", "non-negative decimal"},
		{".5", "non-negative decimal"},
		{"1.2.3", "non-negative decimal"},
		{"-", "non-negative decimal"},
		{"--1", "non-negative decimal"},
		{"0x10", "non-negative decimal"},
		{"1e3", "exponent"},
		{"1E-4", "exponent"},
		{"0.00001", "at most 4 decimal places (1/10000 units)"},
		{"1.23456", "at most 4 decimal places"},
		{"922337203685477.5808", "exceeds the maximum 922337203685477.5807"},
		{"922337203685478", "exceeds the maximum"},
		{"99999999999999999999999999", "exceeds the maximum"},
	} {
		got, err := ParseQuantity(tc.in)
		if err == nil {
			t.Errorf("ParseQuantity(%q) = %d, want error", tc.in, got)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, strconv.Quote(tc.in)) || !strings.Contains(msg, tc.reason) {
			t.Errorf("ParseQuantity(%q) error %q: want it to quote the value and mention %q", tc.in, msg, tc.reason)
		}
		if !errors.Is(err, ErrInvalidQuantity) {
			t.Errorf("ParseQuantity(%q) error does not wrap ErrInvalidQuantity", tc.in)
		}
	}
	_, err := ParseQuantity("0.00001")
	if want := `invalid quantity "0.00001": at most 4 decimal places (1/10000 units) are accepted`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

func TestQuantityString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		q    Quantity
		want string
	}{
		{0, "0"},
		{20000, "2"},
		{5000, "0.5"},
		{1, "0.0001"},
		{12345, "1.2345"},
		{10010, "1.001"},
		{-5000, "-0.5"},
		{MaxQuantity, "922337203685477.5807"},
		{minQuantity, "-922337203685477.5808"},
	} {
		if got := tc.q.String(); got != tc.want {
			t.Errorf("Quantity(%d).String() = %q, want %q", int64(tc.q), got, tc.want)
		}
	}
}

func TestQuantityStringRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 10000; i++ {
		var q Quantity
		switch i % 3 {
		case 0:
			q = Quantity(rng.Int64N(100000))
		case 1:
			q = Quantity(rng.Int64())
		default:
			q = Quantity(rng.Int64N(1 << 40))
		}
		got, err := ParseQuantity(q.String())
		if err != nil || got != q {
			t.Fatalf("ParseQuantity(%q) = %d, %v; want %d", q.String(), got, err, q)
		}
	}
}

func TestQuantityOfAndFloat(t *testing.T) {
	t.Parallel()
	if got := QuantityOf(3); got != 30000 {
		t.Errorf("QuantityOf(3) = %d", got)
	}
	if got := QuantityOf(1 << 30); got.String() != "1073741824" {
		t.Errorf("QuantityOf(1<<30) = %s", got)
	}
	if got := QuantityOf(math.MaxInt64); got != MaxQuantity {
		t.Errorf("QuantityOf(MaxInt64) = %d, want saturation", got)
	}
	if got := QuantityOf(math.MinInt64); got != minQuantity {
		t.Errorf("QuantityOf(MinInt64) = %d, want saturation", got)
	}
	if got := Quantity(12500).Float(); got != 1.25 {
		t.Errorf("Float() = %v", got)
	}
	if got := Quantity(1000).Float(); got != 0.1 {
		t.Errorf("Float() = %v", got)
	}
}

func TestQuantityFromFloat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   float64
		want Quantity
	}{
		{0, 0},
		{math.Copysign(0, -1), 0},
		{0.1, 1000},
		{0.3, 3000},
		{0.1 + 0.2, 3000},
		{2.5, 25000},
		{0.0001, 1},
		{1.2345, 12345},
		{2.675, 26750},
		{16e9, 16e9 * Unit},
		{123456789.0001, 1234567890001},
	} {
		got, err := QuantityFromFloat(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("QuantityFromFloat(%v) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in     float64
		reason string
	}{
		{math.NaN(), "finite"},
		{math.Inf(1), "finite"},
		{math.Inf(-1), "finite"},
		{-1, "negative"},
		{-0.5, "negative"},
		{0.00001, "at most 4 decimal places"},
		{0.00015, "at most 4 decimal places"},
		{1.23456, "at most 4 decimal places"},
		{123456789.00015, "at most 4 decimal places"},
		{1e15, "exceeds the maximum"},
		{math.MaxFloat64, "exceeds the maximum"},
	} {
		got, err := QuantityFromFloat(tc.in)
		if err == nil {
			t.Errorf("QuantityFromFloat(%v) = %d, want error", tc.in, got)
			continue
		}
		if !strings.Contains(err.Error(), tc.reason) || !errors.Is(err, ErrInvalidQuantity) {
			t.Errorf("QuantityFromFloat(%v) error %q: want it to mention %q", tc.in, err, tc.reason)
		}
	}
}

// Every decimal with at most 4 places and at most 15 significant digits (the
// float64 round-trip guarantee; 2^49 units is 15 digits) must come back as
// the quantity ParseQuantity gives for the decimal text.
func TestQuantityFromFloatMatchesParse(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100000; i++ {
		q := Quantity(rng.Int64N(int64(1) << (10 + i%40)))
		f, err := strconv.ParseFloat(q.String(), 64)
		if err != nil {
			t.Fatal(err)
		}
		got, err := QuantityFromFloat(f)
		if err != nil || got != q {
			t.Fatalf("QuantityFromFloat(%v) = %d, %v; want %d", f, got, err, q)
		}
	}
}
