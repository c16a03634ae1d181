package assistants

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWordsKeepTheirFollowingSpace(t *testing.T) {
	cases := map[string][]string{
		"Hello  big world": {"Hello  ", "big ", "world"},
		"  leading":        {"  leading"},
		"trailing \n":      {"trailing \n"},
		"one":              {"one"},
		"":                 nil,
		"a\tb\nc":          {"a\t", "b\n", "c"},
	}
	for in, want := range cases {
		got := Words(in)
		require.Equal(t, want, got, "%q", in)
		require.Equal(t, in, strings.Join(got, ""), "the words give back the text")
	}
}
