package config

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// YAML is the effective configuration, secrets redacted, as `gateway check`
// prints it: every key in struct order, durations and sizes in the form a
// user writes them ("24h", "64KiB"). Loading it back gives the same
// configuration, except for the redacted values.
func (c *Config) YAML() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(node(reflect.ValueOf(*c.Redacted()))); err != nil {
		return nil, fmt.Errorf("marshal configuration: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("marshal configuration: %w", err)
	}
	return buf.Bytes(), nil
}

// node builds the YAML tree of a configuration value.
func node(v reflect.Value) *yaml.Node {
	switch {
	case v.Type() == durationType:
		return scalar("!!str", FormatDuration(time.Duration(v.Int())))
	case v.Type() == sizeType:
		return scalar("!!str", Size(v.Int()).String())
	case v.Type() == keySourceType:
		s := v.Interface().(KeySource)
		return &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{scalar("!!str", s.Kind), scalar("!!str", s.Arg)}}
	}
	switch v.Kind() {
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			name := koanfName(f)
			if name == "" || (strings.Contains(f.Tag.Get("yaml"), "omitempty") && v.Field(i).IsZero()) {
				continue
			}
			n.Content = append(n.Content, scalar("!!str", name), node(v.Field(i)))
		}
		return n
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		scalars := v.Type().Elem().Kind() == reflect.String
		if scalars || v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		for i := 0; i < v.Len(); i++ {
			n.Content = append(n.Content, node(v.Index(i)))
		}
		return n
	case reflect.String:
		return scalar("!!str", v.String())
	case reflect.Bool:
		return scalar("!!bool", strconv.FormatBool(v.Bool()))
	case reflect.Int:
		return scalar("!!int", strconv.FormatInt(v.Int(), 10))
	case reflect.Float64:
		f := strconv.FormatFloat(v.Float(), 'g', -1, 64)
		if !strings.ContainsAny(f, ".eEnN") {
			f += ".0"
		}
		return scalar("!!float", f)
	}
	panic(fmt.Sprintf("config: no YAML form for %s", v.Type()))
}

func scalar(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

// FormatDuration writes d the way a user would ("24h", "1m", "1h30m")
// rather than time.Duration.String's "24h0m0s".
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
