package template

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestSetTagsRefusesWithoutChange: a tag set on one template from a
// build of another, or with a bad tag, or from a build that is not
// ready, is refused, and no template's tags change; a good one moves.
func TestSetTagsRefusesWithoutChange(t *testing.T) {
	ctx := context.Background()
	e := newTestService(t, nil)
	a := e.readyBuild(t, "build-a", "app", []string{key('a')}, "", "default")
	e.readyBuild(t, "build-b", "other", []string{key('b')}, "", "default")
	tags := func(name string) []string {
		tpl, err := e.st.GetTemplate(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(maps.Keys(tpl.Tags))
	}
	for _, tc := range []struct {
		name, template, target string
		tags                   []string
		want                   error
		says                   string
	}{
		{"a build of another template", "other", a.ID, []string{"x"}, errdefs.ErrInvalidArgument, "is of template app, not other"},
		{"another template's tag", "other", "app:default", []string{"x"}, errdefs.ErrInvalidArgument, "is of template app"},
		{"a bad tag among good ones", "app", a.ID, []string{"ok", "bad tag"}, errdefs.ErrInvalidArgument, "not valid"},
		{"an unknown tag", "app", "app:nope", []string{"x"}, errdefs.ErrNotFound, "no tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.s.SetTags(ctx, tc.template, tc.target, tc.tags)
			if errdefs.Class(err) != tc.want || err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.want, tc.says)
			}
			if got := tags("app"); !slices.Equal(got, []string{"default"}) {
				t.Errorf("app's tags changed to %v", got)
			}
			if got := tags("other"); !slices.Equal(got, []string{"default"}) {
				t.Errorf("other's tags changed to %v", got)
			}
		})
	}
	if _, err := e.s.SetTags(ctx, "app", "app:default", []string{"v1"}); err != nil {
		t.Fatal(err)
	}
	if got := tags("app"); !slices.Equal(got, []string{"default", "v1"}) {
		t.Errorf("after a good tag app has %v", got)
	}
	// No name: the target's own template (E2B's POST /templates/tags).
	if b, err := e.s.SetTags(ctx, "", "other:default", []string{"v2"}); err != nil || b.Template != "other" {
		t.Fatalf("SetTags without a name: %v, %v", b, err)
	}
	if got := tags("other"); !slices.Equal(got, []string{"default", "v2"}) {
		t.Errorf("after a good tag other has %v", got)
	}
}
