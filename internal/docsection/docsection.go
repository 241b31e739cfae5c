// Package docsection lets several generators share one docs page: each
// writes only its own section, marked by HTML comments, and keeps the
// sections of the others (docs/measured-failover.md: the lab writes the
// page, TestHandoverGapWithinBudget its planned-handover section).
package docsection

import "strings"

const endMark = "<!-- END "

// Begin is the line that opens section name; note says who generates it.
func Begin(name, note string) string { return "<!-- BEGIN " + name + ": " + note + " -->" }

// End is the line that closes section name.
func End(name string) string { return endMark + name + " -->" }

// span locates section name in page: the start of its BEGIN line and the
// end of its END line; ok is false when either is missing.
func span(page, name string) (from, to int, ok bool) {
	from = strings.Index(page, "<!-- BEGIN "+name+": ")
	if from < 0 {
		return 0, 0, false
	}
	end := strings.Index(page[from:], End(name))
	if end < 0 {
		return 0, 0, false
	}
	return from, from + end + len(End(name)), true
}

// Replace returns page with section name set to body between its
// markers; a page without the section gets it appended.
func Replace(page, name, note, body string) string {
	sec := Begin(name, note) + "\n" + strings.TrimRight(body, "\n") + "\n" + End(name)
	if from, to, ok := span(page, name); ok {
		return page[:from] + sec + page[to:]
	}
	return strings.TrimRight(page, "\n") + "\n\n" + sec + "\n"
}

// Carry returns page with every marked section of old appended that page
// does not have: a generator rewriting the whole page keeps the sections
// others wrote.
func Carry(old, page string) string {
	rest := old
	for {
		i := strings.Index(rest, "<!-- BEGIN ")
		if i < 0 {
			return page
		}
		rest = rest[i:]
		name, _, ok := strings.Cut(strings.TrimPrefix(rest, "<!-- BEGIN "), ":")
		if !ok {
			return page
		}
		from, to, ok := span(rest, name)
		if !ok {
			return page
		}
		if _, _, has := span(page, name); !has {
			page = strings.TrimRight(page, "\n") + "\n\n" + rest[from:to] + "\n"
		}
		rest = rest[to:]
	}
}
