package wire

import (
	"strings"
	"testing"
)

func TestCheckLanguage(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		lang, hash string
		ok         bool
	}{
		{LanguageGo, hash, true},
		{LanguageGo, "", false},
		{LanguagePython, "", true},
		{LanguagePython, hash, false},
		{"Python", "", false},
	} {
		if err := CheckLanguage(tc.lang, tc.hash); (err == nil) != tc.ok {
			t.Errorf("CheckLanguage(%q, %q) = %v, want ok=%v", tc.lang, tc.hash, err, tc.ok)
		}
	}
}
