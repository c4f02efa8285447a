package sched

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Quantity is an amount of one resource in fixed-point units of 1/10000, as
// Ray's FixedPoint: Quantity(10000) is one whole CPU, GPU or custom unit, and
// for "memory" one byte. Integer units keep sums and comparisons exact, which
// float64 cannot (0.1+0.2 != 0.3).
type Quantity int64

// Unit is one whole resource unit (10000 fixed-point units).
const Unit Quantity = 10000

// MaxQuantity is the largest representable quantity, 922337203685477.5807
// whole units. Parsing rejects anything larger; ResourceSet arithmetic
// saturates here instead of wrapping.
const MaxQuantity Quantity = math.MaxInt64

// minQuantity is the saturation floor for Sub on quantities that go negative.
const minQuantity Quantity = math.MinInt64

// decimals is the number of decimal places one fixed-point unit resolves.
const decimals = 4

// ErrInvalidQuantity is wrapped by every error from ParseQuantity and
// QuantityFromFloat, so callers can map it with errors.Is (e.g. to HTTP 400).
var ErrInvalidQuantity = errors.New("invalid quantity")

// QuantityOf returns n whole units (n*Unit), saturating at ±MaxQuantity
// rather than wrapping for |n| beyond 922337203685477.
func QuantityOf(n int64) Quantity {
	const lim = int64(MaxQuantity / Unit)
	switch {
	case n > lim:
		return MaxQuantity
	case n < -lim:
		return minQuantity
	}
	return Quantity(n) * Unit
}

// Float returns q in whole units (q/10000). Use it only for display and JSON;
// float64 is exact for every quantity up to 2^53 fixed-point units.
func (q Quantity) Float() float64 { return float64(q) / float64(Unit) }

// String returns the shortest exact decimal in whole units: 20000 -> "2",
// 5000 -> "0.5", 1 -> "0.0001". For q >= 0 ParseQuantity(q.String()) == q.
func (q Quantity) String() string {
	neg := q < 0
	u := uint64(q)
	if neg {
		u = -u // two's complement: exact even for math.MinInt64
	}
	ip, fp := u/uint64(Unit), u%uint64(Unit)
	s := strconv.FormatUint(ip, 10)
	if fp != 0 {
		f := fmt.Sprintf("%04d", fp)
		s += "." + strings.TrimRight(f, "0")
	}
	if neg {
		s = "-" + s
	}
	return s
}

// ParseQuantity parses a non-negative plain decimal in whole units ("2",
// "0.5", "0.0001", "16000000000") into fixed-point units, as accepted by
// ray.init(resources=...) and Ray's FixedPoint. It uses integer arithmetic on
// the digits, so "0.1" is exactly 1000 units.
//
// It returns an error wrapping ErrInvalidQuantity, quoting s, for: the empty
// string; a sign ("-1", "+1"; "-0" is accepted as 0); NaN or Inf; anything
// that is not digits with an optional single '.', including exponents
// ("1e3"), separators ("1,5") and surrounding space; more than 4 significant
// decimal places ("0.00001"; trailing zeros such as "0.50000" are fine); and
// values above MaxQuantity.
func ParseQuantity(s string) (Quantity, error) {
	q, reason := parseQuantity(s)
	if reason != "" {
		return 0, fmt.Errorf("%w %q: %s", ErrInvalidQuantity, s, reason)
	}
	return q, nil
}

const acceptedForms = "expected a non-negative decimal number such as 2, 0.5 or 0.0001"

// parseQuantity returns the value or a non-empty reason it was rejected.
func parseQuantity(s string) (Quantity, string) {
	if s == "" {
		return 0, "empty; " + acceptedForms
	}
	switch strings.ToLower(strings.TrimLeft(s, "+-")) {
	case "nan", "inf", "infinity":
		return 0, "must be a finite number"
	}
	switch s[0] {
	case '+':
		return 0, "a leading '+' is not accepted; " + acceptedForms
	case '-':
		q, reason := parseUnsigned(s[1:])
		if reason != "" {
			return 0, reason
		}
		if q != 0 {
			return 0, "must not be negative"
		}
		return 0, ""
	}
	return parseUnsigned(s)
}

// parseUnsigned parses digits[.digits] with no sign.
func parseUnsigned(s string) (Quantity, string) {
	intPart, fracPart, hasDot := strings.Cut(s, ".")
	if intPart == "" || (hasDot && fracPart == "") {
		return 0, acceptedForms
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= '0' && c <= '9' || c == '.' && i == len(intPart) {
			continue
		}
		if c == 'e' || c == 'E' {
			return 0, "exponent notation is not accepted; write a plain decimal such as 1000 or 0.001"
		}
		return 0, acceptedForms
	}
	fracPart = strings.TrimRight(fracPart, "0")
	if len(fracPart) > decimals {
		return 0, "at most 4 decimal places (1/10000 units) are accepted"
	}
	const maxWhole = uint64(MaxQuantity / Unit)
	tooLarge := "exceeds the maximum " + MaxQuantity.String()
	var whole uint64
	for i := 0; i < len(intPart); i++ {
		whole = whole*10 + uint64(intPart[i]-'0')
		if whole > maxWhole {
			return 0, tooLarge
		}
	}
	var frac uint64
	for i := 0; i < decimals; i++ {
		frac *= 10
		if i < len(fracPart) {
			frac += uint64(fracPart[i] - '0')
		}
	}
	if whole*uint64(Unit) > uint64(MaxQuantity)-frac {
		return 0, tooLarge
	}
	return Quantity(whole*uint64(Unit) + frac), ""
}

// QuantityFromFloat converts a JSON number in whole units to fixed-point
// units, rounding to the nearest unit so that 0.1 -> 1000 despite binary
// floating point. That is exact for decimals of up to 15 significant digits
// (float64's guarantee), e.g. any 4-place value below 10^11; prefer
// ParseQuantity on the literal text (json.Number) where available.
//
// It returns an error wrapping ErrInvalidQuantity for NaN, ±Inf, negative
// values, values above MaxQuantity, and values that are not a multiple of
// 1/10000 beyond float rounding error (0.00001, 0.00015).
func QuantityFromFloat(f float64) (Quantity, error) {
	fail := func(reason string) (Quantity, error) {
		return 0, fmt.Errorf("%w %v: %s", ErrInvalidQuantity, f, reason)
	}
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return fail("must be a finite number")
	case f < 0:
		return fail("must not be negative")
	}
	x := f * float64(Unit)
	r := math.Round(x)
	if r >= 0x1p63 {
		return fail("exceeds the maximum " + MaxQuantity.String())
	}
	// Allow the error of decoding a <=15-digit decimal and of the multiply:
	// a few ulps of x, plus an absolute floor for values near zero.
	if math.Abs(x-r) > 1e-6+x*0x1p-50 {
		return fail("at most 4 decimal places (1/10000 units) are accepted")
	}
	return Quantity(r), nil
}
