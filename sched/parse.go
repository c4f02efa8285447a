package sched

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrInvalidResources is wrapped by ParseResources errors that are about the
// shape of the input rather than one name or quantity (those wrap
// ErrInvalidResourceName or ErrInvalidQuantity instead).
var ErrInvalidResources = errors.New("invalid resources")

// ParseResources parses custom resources as given to ray.init(resources=...)
// or a CLI flag, in whole units, in either of two forms:
//
//	TPU-v3=2, FPGA=0.5            (text; space around items ignored)
//	{"TPU-v3": 2, "FPGA": 0.5}    (a JSON object of numbers)
//
// Input starting with '{' or '[' after trimming space is taken as JSON;
// numbers are parsed from their literal text with ParseQuantity, so they are
// exact. Empty or all-space input yields an empty, non-nil set.
//
// Every error names the offending entry, e.g.
// `resource "TPU-v3": invalid quantity "-1": must not be negative`, and
// wraps ErrInvalidQuantity, ErrInvalidResourceName or ErrInvalidResources.
// Rejected: duplicate names, invalid names (see ValidateResourceName), text
// items without '=' and empty items, JSON that is not one object whose
// values are all numbers, and invalid quantities (see ParseQuantity).
func ParseResources(s string) (ResourceSet, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return ResourceSet{}, nil
	}
	if t[0] == '{' || t[0] == '[' {
		return parseResourcesJSON(t)
	}
	return parseResourcesText(t)
}

func parseResourcesText(s string) (ResourceSet, error) {
	set := ResourceSet{}
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("%w: item %d is empty; expected name=quantity items separated by commas", ErrInvalidResources, i+1)
		}
		name, value, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%w: item %q has no '='; expected name=quantity such as TPU-v3=2", ErrInvalidResources, item)
		}
		if err := set.put(strings.TrimSpace(name), strings.TrimSpace(value)); err != nil {
			return nil, err
		}
	}
	return set, nil
}

func parseResourcesJSON(s string) (ResourceSet, error) {
	const want = `expected a JSON object of name: number such as {"TPU-v3": 2}`
	bad := func(format string, a ...any) (ResourceSet, error) {
		return nil, fmt.Errorf("%w: %s; %s", ErrInvalidResources, fmt.Sprintf(format, a...), want)
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil {
		return bad("%s", jsonErr(err))
	} else if tok != json.Delim('{') {
		return bad("got %s", describeToken(tok))
	}
	// Walk tokens rather than decoding into a map: a map would silently keep
	// only the last of duplicate keys.
	set := ResourceSet{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad("%s", jsonErr(err))
		}
		name, ok := tok.(string)
		if !ok { // unreachable: the decoder rejects non-string keys itself
			return bad("key is %s", describeToken(tok))
		}
		tok, err = dec.Token()
		if err != nil {
			return bad("resource %q: %s", name, jsonErr(err))
		}
		num, ok := tok.(json.Number)
		if !ok {
			return bad("resource %q: value is %s, not a number", name, describeToken(tok))
		}
		if err := set.put(name, string(num)); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return bad("%s", jsonErr(err))
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return bad("after the object: %s", jsonErr(err))
		}
		return bad("data after the object: %s", describeToken(tok))
	}
	return set, nil
}

// put validates and adds one entry, rejecting duplicates.
func (r ResourceSet) put(name, value string) error {
	if err := ValidateResourceName(name); err != nil {
		return err
	}
	if _, dup := r[name]; dup {
		return fmt.Errorf("%w: resource %q is given more than once", ErrInvalidResources, name)
	}
	q, err := ParseQuantity(value)
	if err != nil {
		return fmt.Errorf("resource %q: %w", name, err)
	}
	r[name] = q
	return nil
}

func jsonErr(err error) string {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return "unexpected end of input"
	}
	return err.Error()
}

func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return fmt.Sprintf("%q", rune(v))
	case string:
		return fmt.Sprintf("string %q", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}
