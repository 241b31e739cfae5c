package examples

import (
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (Debian package prometheus; scripts/test installs it): %v", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The alert rules are valid and pass their unit tests.
func TestAlertRules(t *testing.T) {
	out := promtool(t, "prometheus", "check", "rules", "leasebridge-rules.yaml")
	if !strings.Contains(out, "SUCCESS: 13 rules found") {
		t.Errorf("promtool check rules:\n%s", out)
	}
	out = promtool(t, "prometheus", "test", "rules", "leasebridge-rules.test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
}

func decodeYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return doc
}

// The PrometheusRule manifest carries exactly the rule groups of the rules
// file promtool tests.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	rules := decodeYAML(t, "prometheus/leasebridge-rules.yaml")
	manifest := decodeYAML(t, "kubernetes/prometheus-rule.yaml")
	spec, _ := manifest["spec"].(map[string]any)
	if manifest["kind"] != "PrometheusRule" || spec == nil {
		t.Fatalf("kubernetes/prometheus-rule.yaml: kind %v, no spec", manifest["kind"])
	}
	if !reflect.DeepEqual(spec["groups"], rules["groups"]) {
		t.Errorf("kubernetes/prometheus-rule.yaml spec.groups differ from prometheus/leasebridge-rules.yaml groups")
	}
}
