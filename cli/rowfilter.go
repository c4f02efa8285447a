package cli

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// defaultListLimit is how many rows a listing prints unless --limit says
// otherwise (Ray's state API default is 100; these listings are small
// enough to show more).
const defaultListLimit = 1000

// maxListLimit bounds --limit of the client-side listings.
const maxListLimit = 1_000_000

// rowFlags are --filter and --limit of a listing whose rows are the JSON
// rows of T: the keys --filter takes are T's JSON field names.
func rowFlags[T any]() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringSliceFlag{Name: "filter", Usage: "key=value or key!=value on the JSON fields; repeatable (all must hold); keys: " + strings.Join(jsonKeys[T](), ", ")},
		&ucli.IntFlag{Name: "limit", Value: defaultListLimit, Usage: fmt.Sprintf("most rows to print (1 to %d); the output says how many were left out", maxListLimit)},
	}
}

// jsonKeys are the JSON field names of struct T's exported fields, in
// field order (a field without a json tag is named as Go names it).
func jsonKeys[T any]() []string {
	t := reflect.TypeFor[T]()
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
		case "":
			keys = append(keys, f.Name)
		default:
			keys = append(keys, name)
		}
	}
	return keys
}

// rowPredicate is one --filter: key (=|!=) value.
type rowPredicate struct {
	key, value string
	negate     bool
}

// parseRowFilters parses --filter flags against T's JSON keys; errors name
// the filter and the keys accepted, as Ray's `ray list --filter`.
func parseRowFilters[T any](filters []string) ([]rowPredicate, error) {
	keys := jsonKeys[T]()
	var out []rowPredicate
	for _, f := range filters {
		p := rowPredicate{}
		k, v, ok := strings.Cut(f, "!=")
		if ok {
			p.negate = true
		} else if k, v, ok = strings.Cut(f, "="); !ok {
			return nil, fmt.Errorf("--filter %q: want key=value or key!=value, key one of %s", f, strings.Join(keys, ", "))
		}
		p.key, p.value = strings.TrimSpace(k), strings.TrimSpace(v)
		if !slices.Contains(keys, p.key) {
			return nil, fmt.Errorf("--filter %q: unknown key %q; use %s", f, p.key, strings.Join(keys, ", "))
		}
		out = append(out, p)
	}
	return out, nil
}

// selectRows keeps the rows matching every --filter of c, then the first
// --limit of them; it returns those and how many matched in all. A field
// matches when its JSON value, unquoted for a string, is the value
// (case-insensitively for words such as states).
func selectRows[T any](c *ucli.Context, rows []T) ([]T, int, error) {
	idx, total, err := selectIndices(c, rows)
	if err != nil {
		return nil, 0, err
	}
	kept := make([]T, len(idx))
	for i, j := range idx {
		kept[i] = rows[j]
	}
	return kept, total, nil
}

// selectIndices is selectRows giving the indices of the rows kept.
func selectIndices[T any](c *ucli.Context, rows []T) ([]int, int, error) {
	preds, err := parseRowFilters[T](c.StringSlice("filter"))
	if err != nil {
		return nil, 0, err
	}
	limit := c.Int("limit")
	if limit < 1 || limit > maxListLimit {
		return nil, 0, fmt.Errorf("--limit %d: use 1 to %d", limit, maxListLimit)
	}
	var kept []int
	total := 0
	for i, r := range rows {
		ok, err := rowMatches(r, preds)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			continue
		}
		total++
		if len(kept) < limit {
			kept = append(kept, i)
		}
	}
	return kept, total, nil
}

func rowMatches(row any, preds []rowPredicate) (bool, error) {
	if len(preds) == 0 {
		return true, nil
	}
	b, err := json.Marshal(row)
	if err != nil {
		return false, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return false, err
	}
	for _, p := range preds {
		raw := m[p.key]
		var s string
		if json.Unmarshal(raw, &s) != nil {
			s = string(raw) // a number, bool or null as JSON writes it
		}
		if strings.EqualFold(s, p.value) == p.negate {
			return false, nil
		}
	}
	return true, nil
}

// printLeftOut says how many of how many rows were shown when --limit cut
// the listing (never a silent cut).
// With --json the note goes to stderr, so stdout stays one JSON value.
func printLeftOut(c *ucli.Context, what string, shown, total int) {
	w := c.App.Writer
	if c.Bool("json") {
		w = c.App.ErrWriter
	}
	if shown < total {
		fmt.Fprintf(w, "%d of %d %s shown; %d left out by --limit (raise it, or narrow with --filter)\n", shown, total, what, total-shown)
	}
}
