package relay

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// layers are the package's files from the top down. A file may use what
// the files of its own layer and of the layers below it declare: a type,
// func, var or const, or a method or field. Every non-test file is on one
// layer.
var layers = [][]string{
	// The Relay: New, its methods, Run's loops.
	{"relay.go", "run.go", "backlog.go", "janitor.go", "liveness.go"},
	// The claim strategies, and the wake-ups the unordered workers share.
	{"claim_lease.go", "claim_floor.go", "sweep.go", "sent_batching.go", "claim_lock.go", "claim_ordered.go", "wake_turns.go"},
	// The pipeline every batch goes through.
	{"pipeline.go", "claim.go", "rounds.go", "classify.go", "record.go", "topics.go"},
	// Services and parts: the outage breaker, the listener, the jobs, the
	// batch size, the shutdown bound, the claim tokens.
	{"outage.go", "wake.go", "retention.go", "partitions.go", "batch_size.go", "shutdown.go", "tokens.go"},
	// The vocabulary: configuration, events, waits.
	{"config.go", "ordering.go", "observer.go", "backoff.go", "publisher.go", "pool.go", "doc.go"},
}

// upAllowed are the uses that run up the layers on purpose, "from.go ->
// to.go", each with its reason. At most ten.
var upAllowed = map[string]string{}

// TestLayers fails on each file that uses a file on a higher layer, naming
// what it uses. It counts pairs of files: a file using several names of
// another is one reference. Run it with -v for the counts.
func TestLayers(t *testing.T) {
	layer := map[string]int{}
	for i, files := range layers {
		for _, f := range files {
			layer[f] = i
		}
	}
	refs := fileRefs(t)
	if !refs.uses["relay.go -> config.go"]["Config"] {
		t.Fatal("relay.go's use of Config was not found: the check resolves too little")
	}
	for f := range refs.files {
		if _, ok := layer[f]; !ok {
			t.Errorf("%s is on no layer: add it to layers", f)
		}
	}
	for f := range layer {
		if !refs.files[f] {
			t.Errorf("layers lists %s, which is not a file of the package", f)
		}
	}
	if len(upAllowed) > 10 {
		t.Errorf("upAllowed has %d entries, more than 10", len(upAllowed))
	}
	up := 0
	for _, pair := range slices.Sorted(maps.Keys(refs.uses)) {
		from, to, _ := strings.Cut(pair, " -> ")
		if layer[to] >= layer[from] {
			continue
		}
		up++
		if _, ok := upAllowed[pair]; !ok {
			t.Errorf("%s runs up the layers: %s uses %s", pair, from, strings.Join(slices.Sorted(maps.Keys(refs.uses[pair])), ", "))
		}
	}
	for pair := range upAllowed {
		if _, ok := refs.uses[pair]; !ok {
			t.Errorf("upAllowed lists %s, which is no reference", pair)
		}
	}
	t.Logf("%d references between %d files, %d running up (%d allowed)", len(refs.uses), len(refs.files), up, len(upAllowed))
}

// refs are the package's non-test files and, for each pair "from.go ->
// to.go" of them, the names from uses that to declares.
type refs struct {
	files map[string]bool
	uses  map[string]map[string]bool
}

// fileRefs type-checks the package's non-test files and collects refs.
func fileRefs(t *testing.T) refs {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	r := refs{files: map[string]bool{}, uses: map[string]map[string]bool{}}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		r.files[name] = true
	}
	// Other packages are stubs, and the errors that makes are ignored: the
	// package's own names resolve without them.
	conf := types.Config{Importer: stubImporter{}, Error: func(error) {}}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, _ := conf.Check("relay", fset, files, info)
	for id, obj := range info.Uses {
		// Package-level names, and methods and fields (which have no
		// scope): not locals.
		if obj.Pkg() != pkg || obj.Parent() != pkg.Scope() && obj.Parent() != nil {
			continue
		}
		from, to := fset.Position(id.Pos()).Filename, fset.Position(obj.Pos()).Filename
		if from == to {
			continue
		}
		pair := from + " -> " + to
		if r.uses[pair] == nil {
			r.uses[pair] = map[string]bool{}
		}
		r.uses[pair][obj.Name()] = true
	}
	return r
}

// stubImporter imports every package as an empty one of the same name.
type stubImporter struct{}

func (stubImporter) Import(p string) (*types.Package, error) {
	name := path.Base(p)
	if strings.TrimLeft(name, "v0123456789") == "" { // a major version: ".../backoff/v4"
		name = path.Base(path.Dir(p))
	}
	return types.NewPackage(p, name), nil
}
