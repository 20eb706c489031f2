package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// applyFile applies a YAML config file: a mapping of setting keys (as
// `spaced config print` writes them) to values; a list stands for a
// comma-separated value (pool, egress_floor, registry_allow). An unknown
// key, a value of the wrong shape or one its setting refuses is an error
// naming the file, the line and the key.
func (c *Config) applyFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 { // an empty file sets nothing
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config file %s: line %d: want a mapping of settings (key: value)", path, root.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		s, ok := lookup(k.Value)
		if !ok {
			return fmt.Errorf("config file %s: line %d: unknown key %q (`spaced config print` lists the keys)", path, k.Line, k.Value)
		}
		if seen[k.Value] {
			return fmt.Errorf("config file %s: line %d: %s is set twice", path, k.Line, k.Value)
		}
		seen[k.Value] = true
		value, err := scalar(v)
		if err == nil && value == "" && !s.EmptyIsValue {
			continue // "key:" with nothing: the default stands
		}
		if err == nil {
			err = s.set(c, value)
		}
		if err != nil {
			return fmt.Errorf("config file %s: line %d: %s: %w", path, v.Line, s.Key, err)
		}
	}
	return nil
}

// scalar answers a value node as a setting's text: a scalar as written, a
// list of scalars joined by commas.
func scalar(n *yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "", nil
		}
		return n.Value, nil
	case yaml.SequenceNode:
		var parts []string
		for _, item := range n.Content {
			if item.Kind != yaml.ScalarNode {
				return "", errors.New("want a value or a list of values")
			}
			parts = append(parts, item.Value)
		}
		return strings.Join(parts, ","), nil
	}
	return "", errors.New("want a value or a list of values")
}

// Print writes c as a config file that Load reads back to the same
// settings: every key, in the README's order, with its meaning as a
// comment; secrets that are set show as "<redacted>".
func (c Config) Print() []byte {
	var b bytes.Buffer
	b.WriteString("# spaced's effective settings (spaced config print).\n")
	for _, s := range settings {
		v := s.get(c)
		if s.Secret && v != "" {
			v = "<redacted>"
		}
		node := yaml.Node{Kind: yaml.ScalarNode, Value: v, Style: yaml.DoubleQuotedStyle}
		out, _ := yaml.Marshal(&node)
		fmt.Fprintf(&b, "\n# %s: %s (default %s)\n%s: %s", s.Env(), strings.ReplaceAll(s.Doc, "`", ""), strings.ReplaceAll(s.Default, "`", ""), s.Key, out)
	}
	return b.Bytes()
}

// MarkdownTable is the README's table of settings.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| variable (file key) | default | meaning |\n| --- | --- | --- |\n")
	for _, s := range settings {
		fmt.Fprintf(&b, "| `%s` (`%s`) | %s | %s |\n", s.Env(), s.Key, s.Default, s.Doc)
	}
	return b.String()
}
