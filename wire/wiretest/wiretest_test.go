package wiretest

import (
	"slices"
	"testing"
)

func TestKeysAreTheShapeWithoutTheValues(t *testing.T) {
	got, err := Keys([]byte(`{"v":1,"checks":{"items":[{"kind":"peer","uplink":{"features":{"tx-checksum-ip-generic":"off"}}}]},"evidence":{"anything":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"checks", "checks.items", "checks.items[].kind", "checks.items[].uplink", "checks.items[].uplink.features", "evidence", "v"}
	if !slices.Equal(got, want) {
		t.Errorf("Keys = %v, want %v (features and evidence hold values by name)", got, want)
	}
	golden, err := Keys(Golden(t, EventFile))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(golden, "misspelt") || !slices.Contains(golden, "summary") {
		t.Errorf("the golden event's keys %v", golden)
	}
}
