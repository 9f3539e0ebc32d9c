package config

import (
	"fmt"
	"strconv"
	"strings"
)

// neverFinal reports the statuses that SPEC §1 always releases, whatever the
// route lists: the provider's own retry must reach the upstream again.
func neverFinal(status int) bool {
	return status == 408 || status == 425 || status == 429 || status >= 500
}

// ParseStatus checks one record.statuses entry: a class "1xx".."4xx" or a
// code 100..499 (as text). It returns the entry in canonical form ("2XX" →
// "2xx"). 408, 425, 429 and anything 5xx are rejected as never final.
func ParseStatus(s string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(s))
	if len(e) == 3 && e[1:] == "xx" && e[0] >= '1' && e[0] <= '9' {
		if e[0] >= '5' {
			return "", fmt.Errorf("%q is never final: 5xx answers are always released so the provider's retry gets through", s)
		}
		return e, nil
	}
	code, err := strconv.Atoi(e)
	if err != nil || len(e) != 3 || code < 100 || code > 599 {
		return "", fmt.Errorf("bad status %q (want a class such as \"2xx\" or a code 100-599)", s)
	}
	if neverFinal(code) {
		return "", fmt.Errorf("%d is never final: 408, 425, 429 and 5xx are always released so the provider's retry gets through", code)
	}
	return e, nil
}

// ParseStatuses validates record.statuses and returns the matcher of final
// statuses. The matcher never accepts 408, 425, 429 or 5xx, even through a
// class ("4xx" matches 404, not 429).
func ParseStatuses(list []string) (func(status int) bool, error) {
	if len(list) == 0 {
		return nil, fmt.Errorf("no final status: nothing would ever be recorded")
	}
	canon := make([]string, len(list))
	for i, s := range list {
		c, err := ParseStatus(s)
		if err != nil {
			return nil, fmt.Errorf("statuses[%d]: %w", i, err)
		}
		canon[i] = c
	}
	rec := Record{Statuses: canon}
	return rec.IsFinal, nil
}

// matchStatus matches one canonical entry against a status code.
func matchStatus(entry string, status int) bool {
	if len(entry) != 3 {
		return false
	}
	if entry[1] == 'x' || entry[1] == 'X' {
		return status/100 == int(entry[0]-'0')
	}
	code, err := strconv.Atoi(entry)
	return err == nil && code == status
}
