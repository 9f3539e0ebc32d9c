package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is a number of bytes. In configuration it is written as plain bytes
// (1048576, "1048576" or "1048576B"), with a binary unit (KiB, MiB, GiB,
// TiB: powers of 1024) or a decimal one (KB, MB, GB, TB: powers of 1000).
// Units are case-insensitive; the number must be a whole non-negative integer.
type Size int64

// Common sizes.
const (
	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
)

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first so "KiB" is not read as "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// ParseSize parses a size such as "64KiB", "1MiB", "512KB" or "1024".
func ParseSize(s string) (Size, error) {
	in := strings.TrimSpace(s)
	num, mult := in, int64(1)
	lower := strings.ToLower(in)
	for _, u := range sizeUnits {
		if strings.HasSuffix(lower, u.suffix) {
			num, mult = strings.TrimSpace(in[:len(in)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || num == "" || num[0] == '+' || num[0] == '-' {
		return 0, fmt.Errorf("bad size %q (want whole bytes or a unit such as 64KiB, 1MiB, 1GiB)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(n * mult), nil
}

// String formats the size with the largest binary unit that divides it
// exactly ("1MiB"), or as bytes ("1000B"); ParseSize reads it back.
func (s Size) String() string {
	switch {
	case s == 0:
		return "0"
	case s%(1<<40) == 0:
		return strconv.FormatInt(int64(s>>40), 10) + "TiB"
	case s%GiB == 0:
		return strconv.FormatInt(int64(s/GiB), 10) + "GiB"
	case s%MiB == 0:
		return strconv.FormatInt(int64(s/MiB), 10) + "MiB"
	case s%KiB == 0:
		return strconv.FormatInt(int64(s/KiB), 10) + "KiB"
	default:
		return strconv.FormatInt(int64(s), 10) + "B"
	}
}

// UnmarshalText parses the textual form, so Size works with decoders that
// honour encoding.TextUnmarshaler.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText writes String(); it also makes YAML and JSON output readable.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
