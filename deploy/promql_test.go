package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// PromQL words that are never metric names. Aggregation operators may be followed by a
// grouping clause instead of "(", so they are listed rather than told by the next byte.
var (
	promqlAggregations = set("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
		"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio")
	// promqlGrouping words are followed by a label list in parentheses, which is skipped.
	promqlGrouping = set("by", "without", "on", "ignoring", "group_left", "group_right")
	promqlKeywords = set("bool", "offset", "and", "or", "unless", "inf", "nan", "atan2")
)

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[strings.ToLower(w)] = true
	}
	return m
}

// grafanaVars are the Grafana variables the dashboard may use, with the value the checks
// substitute (a range that holds several 1 s scrapes).
var grafanaVars = map[string]string{
	"$__rate_interval": "15s",
	"$__interval":      "5s",
	"$__range":         "5m",
}

// expandGrafana substitutes grafanaVars in expr; any other "$" is an error, so a new
// variable in the dashboard makes the checks say what they cannot evaluate.
func expandGrafana(expr string) (string, error) {
	keys := make([]string, 0, len(grafanaVars))
	for k := range grafanaVars {
		keys = append(keys, k)
	}
	// Longest first: $__rate_interval before $__range-like prefixes.
	slices.SortFunc(keys, func(a, b string) int { return len(b) - len(a) })
	for _, k := range keys {
		expr = strings.ReplaceAll(expr, k, grafanaVars[k])
	}
	if i := strings.IndexByte(expr, '$'); i >= 0 {
		return "", fmt.Errorf("unsupported Grafana variable at %q (add it to grafanaVars)", expr[i:])
	}
	return expr, nil
}

// metricNames returns the metric names an expression selects, in order of appearance,
// without duplicates. It is a lexer, not a parser: strings, label matchers ({...}), ranges
// ([...]), numbers and durations are skipped; an identifier followed by "(" is a function;
// aggregation operators, keywords and grouping label lists are not names. A __name__
// matcher is refused: the checks want every metric spelled out.
func metricNames(expr string) ([]string, error) {
	var out []string
	s := expr
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(s, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			j, err := skipUntil(s, i, '}')
			if err != nil {
				return nil, err
			}
			if strings.Contains(s[i:j], "__name__") {
				return nil, fmt.Errorf("%q: __name__ matchers are not supported; name the metric", expr)
			}
			i = j
		case c == '[':
			j, err := skipUntil(s, i, ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			// Numbers, hex, exponents and durations (5m, 1h30m, 1e-9).
			for i < len(s) && (isIdent(s[i]) || s[i] == '.' ||
				((s[i] == '+' || s[i] == '-') && (s[i-1] == 'e' || s[i-1] == 'E'))) {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && isSpace(s[k]) {
				k++
			}
			next := byte(0)
			if k < len(s) {
				next = s[k]
			}
			lw := strings.ToLower(word)
			switch {
			case promqlGrouping[lw]:
				if next == '(' {
					end, err := skipUntil(s, k, ')')
					if err != nil {
						return nil, err
					}
					j = end
				}
			case promqlAggregations[lw], promqlKeywords[lw], next == '(':
				// aggregation, keyword or function call
			default:
				if !slices.Contains(out, word) {
					out = append(out, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return out, nil
}

// skipString returns the index after the string literal starting at s[i].
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("%q: unterminated string", s)
}

// skipUntil returns the index after the close byte that ends the group opened at s[i],
// skipping strings and nested groups of the same kind.
func skipUntil(s string, i int, close byte) (int, error) {
	open := s[i]
	depth := 0
	for j := i; j < len(s); {
		switch s[j] {
		case '"', '\'', '`':
			k, err := skipString(s, j)
			if err != nil {
				return 0, err
			}
			j = k
			continue
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return j + 1, nil
			}
		}
		j++
	}
	return 0, fmt.Errorf("%q: unbalanced %q", s, open)
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isIdent(c byte) bool      { return isIdentStart(c) || isDigit(c) }
func isSpace(c byte) bool      { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`sum by (path, reason) (rate(triage_decisions_total[5m]))`, []string{"triage_decisions_total"}},
		{`histogram_quantile(0.95, sum by (le, pool) (rate(vllm:time_to_first_token_seconds_bucket{job="x"}[1m])))`,
			[]string{"vllm:time_to_first_token_seconds_bucket"}},
		{`sum(rate(a_total{reason=~"load_shedding|x}"}[5m])) / sum(rate(a_total[5m])) * 100`, []string{"a_total"}},
		{`sum(rate(x_sum[1m])) by (le) / on(instance) group_left(version) y_info offset 5m`, []string{"x_sum", "y_info"}},
		{`max without (instance) (kv) > bool 0.5 and count(z) > 1e-9`, []string{"kv", "z"}},
		{`rate(foo[5m:30s]) unless bar @ start()`, []string{"foo", "bar"}},
		{"topk(3, sum by (le) (q_bucket)) # a comment with words", []string{"q_bucket"}},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := metricNames(tc.expr)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	for _, bad := range []string{`{__name__="x"}`, `rate(x[5m)`, `x{a="b}`} {
		_, err := metricNames(bad)
		require.Error(t, err, bad)
	}
}

func TestExpandGrafana(t *testing.T) {
	got, err := expandGrafana(`rate(x[$__rate_interval]) + rate(y[$__interval])`)
	require.NoError(t, err)
	require.Equal(t, `rate(x[15s]) + rate(y[5s])`, got)
	_, err = expandGrafana(`x{instance=~"$instance"}`)
	require.Error(t, err)
}

// exposition is what one /metrics scrape (text format 0.0.4) declares.
type exposition struct {
	families map[string]string // family name → type
	samples  map[string]string // sample name (x, x_bucket, x_sum, ...) → its family's type
}

var sampleName = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`)

func parseExposition(body string) exposition {
	e := exposition{families: map[string]string{}, samples: map[string]string{}}
	family, typ := "", ""
	for _, line := range strings.Split(body, "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			parts := strings.Fields(f)
			if len(parts) == 2 {
				family, typ = parts[0], parts[1]
				e.families[family] = typ
			}
			continue
		}
		m := sampleName.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		t := "untyped"
		if name == family || (strings.HasPrefix(name, family) &&
			slices.Contains([]string{"_bucket", "_sum", "_count", "_total", "_created"}, name[len(family):])) {
			t = typ
		}
		e.samples[name] = t
	}
	return e
}

// check reports whether name can be queried from this exposition: it must be a sample name,
// _bucket must belong to a histogram, and a histogram or summary is queried through its
// _bucket, _sum or _count series, not its family name.
func (e exposition) check(name string) error {
	if typ := e.families[name]; typ == "histogram" || typ == "summary" {
		return fmt.Errorf("%s is a %s: query %s_bucket, _sum or _count", name, typ, name)
	}
	typ, ok := e.samples[name]
	if !ok {
		return fmt.Errorf("%s: %w in the scrape", name, errNotFound)
	}
	if strings.HasSuffix(name, "_bucket") && typ != "histogram" {
		return fmt.Errorf("%s: _bucket of a %s, not of a histogram", name, typ)
	}
	return nil
}

func TestParseExposition(t *testing.T) {
	e := parseExposition(`# HELP h x
# TYPE h histogram
h_bucket{le="1"} 0
h_bucket{le="+Inf"} 0
h_sum 0
h_count 0
# TYPE c_total counter
c_total{a="b"} 1
# TYPE vllm:g gauge
vllm:g{model_name="m"} 0.5
`)
	require.NoError(t, e.check("h_bucket"))
	require.NoError(t, e.check("h_sum"))
	require.NoError(t, e.check("c_total"))
	require.NoError(t, e.check("vllm:g"))
	require.ErrorContains(t, e.check("h"), "histogram")
	require.ErrorIs(t, e.check("nope"), errNotFound)
}
