package loadbench

import (
	"slices"
	"strings"
	"testing"
)

func names(systems []*system) []string {
	out := make([]string, len(systems))
	for i, s := range systems {
		out[i] = s.name
	}
	return out
}

// -systems keeps the systems it names, in the fleet's order; a name no
// system has (a typo, N0 where nginx is missing) fails the run instead of
// leaving that system, and every goal it is part of, silently out.
func TestSelectSystems(t *testing.T) {
	all := func() []*system { return []*system{{name: "U0"}, {name: "B1"}, {name: "B2"}, {name: "F1r"}} }
	got, err := selectSystems(all(), nil)
	if err != nil || !slices.Equal(names(got), []string{"U0", "B1", "B2", "F1r"}) {
		t.Errorf("no -systems: %v, %v; want every system", names(got), err)
	}
	got, err = selectSystems(all(), []string{"F1r", "B2"})
	if err != nil || !slices.Equal(names(got), []string{"B2", "F1r"}) {
		t.Errorf("-systems F1r,B2: %v, %v; want B2 F1r", names(got), err)
	}
	_, err = selectSystems(all(), []string{"B2", "N0", "F1x"})
	if err == nil || !strings.Contains(err.Error(), "N0, F1x") {
		t.Errorf("-systems B2,N0,F1x: error %v, want one naming N0 and F1x", err)
	}
}
