package docsection

import "testing"

func TestReplaceAndCarry(t *testing.T) {
	page := "# Page\n\ntext\n"
	one := Replace(page, "handover", "by a test", "## Handover\n\n1 ms\n")
	want := "# Page\n\ntext\n\n<!-- BEGIN handover: by a test -->\n## Handover\n\n1 ms\n<!-- END handover -->\n"
	if one != want {
		t.Fatalf("Replace appended:\n%q\nwant\n%q", one, want)
	}
	two := Replace(one, "handover", "by a test", "## Handover\n\n2 ms")
	if want2 := "# Page\n\ntext\n\n<!-- BEGIN handover: by a test -->\n## Handover\n\n2 ms\n<!-- END handover -->\n"; two != want2 {
		t.Fatalf("Replace in place:\n%q\nwant\n%q", two, want2)
	}
	// The page's own generator rewrites it and keeps the section.
	if got := Carry(two, "# Page\n\nnew text\n"); got != "# Page\n\nnew text\n\n<!-- BEGIN handover: by a test -->\n## Handover\n\n2 ms\n<!-- END handover -->\n" {
		t.Fatalf("Carry:\n%q", got)
	}
	// A section the new page has already is not doubled; no section, no change.
	if got := Carry(two, two); got != two {
		t.Fatalf("Carry doubled a section:\n%q", got)
	}
	if got := Carry("# Page\n", "# New\n"); got != "# New\n" {
		t.Fatalf("Carry without sections: %q", got)
	}
}
