package store

import "strings"

// likeEscaper turns a topic pattern into a LIKE pattern: a topic's _ (and
// any % or \) stands for itself, escaped with \, which is LIKE's escape
// character by default on PostgreSQL, MySQL and MariaDB; * becomes %.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`, `*`, `%`)

// OrderedTopics returns how a store's statements tell the rows of the
// ordered topics, given as topics or patterns in which * stands for any
// run of characters (relay.Ordering.Topics): all is true when a pattern
// matches every topic; like holds each pattern as a LIKE pattern, so that
// "topic LIKE p" for some p in like holds exactly for the topics the
// patterns match. like is never nil: an empty list is an empty array.
func OrderedTopics(patterns []string) (all bool, like []string) {
	like = make([]string, 0, len(patterns))
	for _, p := range patterns {
		if p != "" && strings.Trim(p, "*") == "" {
			all = true
		}
		like = append(like, likeEscaper.Replace(p))
	}
	return all, like
}
