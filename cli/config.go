package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	ucli "github.com/urfave/cli/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// envPrefix starts the environment variable of every start and join flag:
// NODEUP_ and the flag's name in upper case with _ for -
// (--num-cpus: NODEUP_NUM_CPUS).
const envPrefix = "NODEUP_"

// maxConfigFileBytes bounds one config file: a node's settings fit in a
// few KiB, and a file past this is not one.
const maxConfigFileBytes = 1 << 20

// configFlag is start's and join's --config.
func configFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "config", Usage: "config file (HCL or JSON, as Nomad's agent config) or a directory whose *.hcl and *.json files are read in name order, later ones winning; keys are the flag names with _ for - (data_dir = \"/var/lib/nodeup\"). A flag, then its NODEUP_* variable, overrides the file"}
}

// EnvVar returns the environment variable that sets the start and join
// flag name: "num-cpus" gives "NODEUP_NUM_CPUS".
func EnvVar(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// configKey is flag's key in a config file: "num-cpus" gives "num_cpus".
func configKey(flag string) string { return strings.ReplaceAll(flag, "-", "_") }

// withEnv gives every flag its NODEUP_* variable (EnvVar), after any it
// already has, so each can come from an EnvironmentFile.
func withEnv(flags []ucli.Flag) []ucli.Flag {
	for _, f := range flags {
		name := f.Names()[0]
		env := EnvVar(name)
		add := func(vars *[]string) {
			if !slices.Contains(*vars, env) {
				*vars = append(*vars, env)
			}
		}
		switch f := f.(type) {
		case *ucli.StringFlag:
			add(&f.EnvVars)
		case *ucli.IntFlag:
			add(&f.EnvVars)
		case *ucli.BoolFlag:
			add(&f.EnvVars)
		case *ucli.Float64Flag:
			add(&f.EnvVars)
		case *ucli.StringSliceFlag:
			add(&f.EnvVars)
		case *ucli.DurationFlag:
			add(&f.EnvVars)
		default:
			panic(fmt.Sprintf("withEnv: flag --%s of type %T: add its type here", name, f))
		}
	}
	return flags
}

// ConfigError is a config file that cannot be used: unreadable, not HCL or
// JSON, a key that is no flag, or a value of the wrong type. File and Line
// (0 when unknown) say where.
type ConfigError struct {
	File string
	Line int
	// Key is the config key at fault, "" for the file as a whole.
	Key string
	Err error
}

// Error reads "config file <file>:<line>: key "<key>": <why>".
func (e *ConfigError) Error() string {
	where := e.File
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key == "" {
		return fmt.Sprintf("config file %s: %v", where, e.Err)
	}
	return fmt.Sprintf("config file %s: key %q: %v", where, e.Key, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// ErrUnknownConfigKey is wrapped by the ConfigError of a key that names no
// flag of the command.
var ErrUnknownConfigKey = errors.New("unknown key")

// applyConfig sets every flag of c's command that neither the command line
// nor its NODEUP_* variable set from the --config file or directory, so the
// precedence is flag > environment > config file > default, as Nomad's
// and Consul's. Keys are the flags' names with _ for -; a key that names no
// flag, or a value that does not convert to the flag's type, is a
// *ConfigError naming the file, line and key.
func applyConfig(c *ucli.Context) error {
	path := c.String("config")
	if path == "" {
		return nil
	}
	files, err := configFiles(path)
	if err != nil {
		return err
	}
	flags := map[string]ucli.Flag{}
	for _, f := range c.Command.Flags {
		if n := f.Names()[0]; n != "config" && n != "help" {
			flags[configKey(n)] = f
		}
	}
	type setting struct {
		attr *hcl.Attribute
		file string
	}
	for _, name := range reloadable {
		configPinned[name] = c.IsSet(name)
	}
	merged := map[string]setting{}
	for _, file := range files {
		attrs, err := readConfigFile(file)
		if err != nil {
			return err
		}
		for key, a := range attrs {
			if _, ok := flags[key]; !ok {
				return unknownKey(file, a, flags)
			}
			merged[key] = setting{a, file} // later files win, as Nomad's -config dirs
		}
	}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		s := merged[key]
		f := flags[key]
		name := f.Names()[0]
		if c.IsSet(name) {
			continue
		}
		cerr := func(err error) error {
			return &ConfigError{File: s.file, Line: s.attr.NameRange.Start.Line, Key: key, Err: err}
		}
		v, diags := s.attr.Expr.Value(nil)
		if diags.HasErrors() {
			return cerr(errors.New(diagsText(diags)))
		}
		vals, err := configValues(v, f)
		if err != nil {
			return cerr(err)
		}
		for _, val := range vals {
			if err := c.Set(name, val); err != nil {
				return cerr(fmt.Errorf("%q: %v", val, err))
			}
		}
	}
	return nil
}

// configFiles is path itself, or a directory's *.hcl and *.json files in
// name order.
func configFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &ConfigError{File: path, Err: err}
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, &ConfigError{File: path, Err: err}
	}
	var files []string
	for _, e := range entries { // ReadDir sorts by name
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".hcl" || ext == ".json") {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	return files, nil
}

// readConfigFile parses one file, JSON when it ends in .json and HCL
// otherwise, into its top-level attributes. Blocks are refused: every
// setting is a flag, a plain key = value.
func readConfigFile(file string) (hcl.Attributes, error) {
	fh, err := os.Open(file)
	if err != nil {
		return nil, &ConfigError{File: file, Err: err}
	}
	defer fh.Close()
	src, err := io.ReadAll(io.LimitReader(fh, maxConfigFileBytes+1))
	if err != nil {
		return nil, &ConfigError{File: file, Err: err}
	}
	if len(src) > maxConfigFileBytes {
		return nil, &ConfigError{File: file, Err: fmt.Errorf("larger than %d bytes", maxConfigFileBytes)}
	}
	p := hclparse.NewParser()
	var f *hcl.File
	var diags hcl.Diagnostics
	if strings.HasSuffix(file, ".json") {
		f, diags = p.ParseJSON(src, file)
	} else {
		f, diags = p.ParseHCL(src, file)
	}
	if diags.HasErrors() {
		return nil, &ConfigError{File: file, Line: diagLine(diags), Err: errors.New(diagsText(diags))}
	}
	attrs, diags := f.Body.JustAttributes()
	if diags.HasErrors() {
		return nil, &ConfigError{File: file, Line: diagLine(diags), Err: fmt.Errorf("%s (settings are key = value; blocks are not accepted)", diagsText(diags))}
	}
	return attrs, nil
}

func unknownKey(file string, a *hcl.Attribute, flags map[string]ucli.Flag) error {
	hint := ""
	if _, ok := flags[configKey(a.Name)]; ok {
		hint = fmt.Sprintf(" (did you mean %s? keys use _ where flags use -)", configKey(a.Name))
	}
	known := make([]string, 0, len(flags))
	for k := range flags {
		known = append(known, k)
	}
	sort.Strings(known)
	return &ConfigError{File: file, Line: a.NameRange.Start.Line, Key: a.Name,
		Err: fmt.Errorf("%w%s; accepted keys: %s", ErrUnknownConfigKey, hint, strings.Join(known, ", "))}
}

// configValues turns a config value into the strings c.Set takes for f:
// one for a scalar flag, one per element for a list. HCL's usual
// conversions apply (8 for "8", "true" for true); anything else names the
// type it wants.
func configValues(v cty.Value, f ucli.Flag) ([]string, error) {
	if v.IsNull() || !v.IsWhollyKnown() {
		return nil, errors.New("no value")
	}
	want := cty.String
	switch f.(type) {
	case *ucli.IntFlag, *ucli.Float64Flag:
		want = cty.Number
	case *ucli.BoolFlag:
		want = cty.Bool
	case *ucli.StringSliceFlag:
		if v.Type() == cty.String {
			v = cty.ListVal([]cty.Value{v})
		}
		lv, err := convert.Convert(v, cty.List(cty.String))
		if err != nil || lv.IsNull() {
			return nil, fmt.Errorf("want a list of strings, such as [\"10.0.0.1\", \"10.0.0.2\"], or one string; got %s", v.Type().FriendlyName())
		}
		var out []string
		for _, e := range lv.AsValueSlice() {
			if e.IsNull() {
				return nil, errors.New("a list element is null")
			}
			out = append(out, e.AsString())
		}
		return out, nil
	}
	cv, err := convert.Convert(v, want)
	if err != nil || cv.IsNull() {
		if v.Type() == cty.String {
			return nil, fmt.Errorf("want a %s, got the string %q", want.FriendlyName(), v.AsString())
		}
		return nil, fmt.Errorf("want a %s, got %s", want.FriendlyName(), v.Type().FriendlyName())
	}
	switch want {
	case cty.Number:
		return []string{cv.AsBigFloat().Text('f', -1)}, nil
	case cty.Bool:
		return []string{fmt.Sprint(cv.True())}, nil
	}
	return []string{cv.AsString()}, nil
}

func diagsText(diags hcl.Diagnostics) string {
	var parts []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		s := d.Summary
		if d.Detail != "" {
			s += ": " + d.Detail
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func diagLine(diags hcl.Diagnostics) int {
	for _, d := range diags {
		if d.Subject != nil {
			return d.Subject.Start.Line
		}
	}
	return 0
}
