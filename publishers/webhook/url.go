package webhook

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// template is Config.URL, parsed: the text before the query (where the
// topic is path-escaped) and the query (where it is query-escaped).
type template struct {
	path, query           string // query without its '?'; hasQuery tells "" from none
	hasQuery              bool
	shownPath, shownQuery string // path and query with the URL's password redacted, for errors
	origin                string // scheme://host[:port], for Probe
}

// parseTemplate checks Config.URL and splits it.
func parseTemplate(raw string) (*template, error) {
	if raw == "" {
		return nil, errors.New("required")
	}
	sample := strings.ReplaceAll(raw, TopicPlaceholder, "topic")
	if strings.ContainsAny(sample, "{}") {
		return nil, fmt.Errorf("%q holds a brace that is not part of %s, the only placeholder", raw, TopicPlaceholder)
	}
	u, err := parseEndpoint(sample)
	if err != nil {
		return nil, err
	}
	// The placeholder may not reach the scheme or the host: every topic
	// goes to the one host the URL names.
	afterScheme := strings.Index(raw, "://") + len("://")
	authorityEnd := len(raw)
	if i := strings.IndexAny(raw[afterScheme:], "/?"); i >= 0 {
		authorityEnd = afterScheme + i
	}
	if i := strings.Index(raw, TopicPlaceholder); i >= 0 && i < authorityEnd {
		return nil, fmt.Errorf("%s may appear only in the path or the query, not in the scheme or host", TopicPlaceholder)
	}
	t := &template{origin: u.Scheme + "://" + u.Host}
	t.path, t.query, t.hasQuery = strings.Cut(raw, "?")
	shown := redactURL(raw)
	t.shownPath, t.shownQuery, _ = strings.Cut(shown, "?")
	return t, nil
}

// parseEndpoint parses an absolute http or https URL without a fragment.
func parseEndpoint(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url's errors quote the URL, or a piece of it that may be of the
		// password: say what is wrong without the quotes.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s: %s (in a user name or password, percent-encode / ? and #, e.g. / as %%2F)", unparsable, quoted.ReplaceAllString(err.Error(), ""))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%s: the scheme must be http or https", redactURL(raw))
	case u.Host == "" || u.Opaque != "":
		return nil, fmt.Errorf("%s has no host: use an absolute URL such as https://hooks.example.com/events/%s", redactURL(raw), TopicPlaceholder)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, fmt.Errorf("%s has a fragment (#...), which is never sent", redactURL(raw))
	}
	return u, nil
}

// expand returns the URL of topic, and the same with the URL's password
// redacted, for errors and logs.
func (t *template) expand(topic string) (target, shown string) {
	return t.fill(t.path, t.query, topic), t.fill(t.shownPath, t.shownQuery, topic)
}

func (t *template) fill(path, query, topic string) string {
	s := strings.ReplaceAll(path, TopicPlaceholder, url.PathEscape(topic))
	if t.hasQuery {
		s += "?" + strings.ReplaceAll(query, TopicPlaceholder, url.QueryEscape(topic))
	}
	return s
}

// unparsable stands for a URL that does not parse in errors and logs: a
// password may be anywhere in its text.
const unparsable = "[unparsable URL]"

// quoted matches the quoted pieces of net/url's errors, and the space
// before each.
var quoted = regexp.MustCompile(` ?"(?:[^"\\]|\\.)*"`)

// redactURL replaces the password of a URL's user information, if any,
// with [REDACTED], or returns unparsable for a URL that does not parse.
func redactURL(raw string) string {
	if _, err := url.Parse(raw); err != nil {
		return unparsable
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	end := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	authority := rest[:end]
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return raw
	}
	user, _, hasPassword := strings.Cut(authority[:at], ":")
	if !hasPassword {
		return raw
	}
	return scheme + "://" + user + ":" + redacted + authority[at:] + rest[end:]
}
