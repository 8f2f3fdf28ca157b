package gateway

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/flashgate/flashgate"
)

// TestAnswersFromTable checks that every sentinel of flashgate's one error
// table, wrapped or not, is answered with the table's status and a body
// naming its code, and that an unknown error is a 500 "internal".
func TestAnswersFromTable(t *testing.T) {
	for _, err := range append(flashgate.Errors(), errInternal) {
		status, code := flashgate.ErrorStatus(err)
		for _, e := range []error{err, fmt.Errorf("wrapped: %w", err)} {
			a := answerFor(e)
			var got struct{ Error string }
			if jerr := json.Unmarshal(a.body, &got); jerr != nil || a.status != status || got.Error != code {
				t.Errorf("answerFor(%v) = %d %s, want %d {\"error\":%q}", e, a.status, a.body, status, code)
			}
		}
	}
	if a := ansNoMethod; a.status != 405 || string(a.body) != `{"error":"method_not_allowed"}` {
		t.Errorf("ansNoMethod = %d %s, want 405 {\"error\":\"method_not_allowed\"}", a.status, a.body)
	}
	for v := verdictUnavailable; v <= verdictSoldOut; v++ {
		if verdictErrs[v] == nil || verdictAnswers[v].body == nil {
			t.Errorf("verdict %d has no sentinel or answer", v)
		}
	}
}
