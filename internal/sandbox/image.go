package sandbox

import (
	"context"

	"github.com/spacesandbox/space/internal/runtime"
)

// Templates is where sandboxes find their images: package template
// implements it over built templates (and the base image the install
// script makes).
type Templates interface {
	// Resolve returns the image a new sandbox of template ref ("name" or
	// "name:tag") runs on.
	Resolve(ctx context.Context, ref string) (*Image, error)
	// ImageRoot is the directory of image of template (a checkpoint
	// restores onto the image it was taken on, whatever the template's
	// current one).
	ImageRoot(template, image string) (string, error)
}

// Image is a template image as a create sees it.
type Image struct {
	// Template is the template's name as the caller gave it.
	Template string
	// ID names the image directory (stored with each sandbox).
	ID string
	// Root is the image directory on this node.
	Root string
	// Env, User and Workdir are what the template's steps left: every
	// command of the sandbox gets them unless it says otherwise.
	Env     map[string]string
	User    string
	Workdir string
	// Limits are the template's own (zero fields: the node's defaults).
	Limits runtime.Limits
	// Start, when set, is the checkpoint of the template's start command
	// running: a sandbox restores it instead of booting.
	Start *StartImage
}

// StartImage is a started template's checkpoint on this node.
type StartImage struct {
	// ID names it (logs).
	ID string
	// Dir is the local checkpoint image.
	Dir string
	// Token is the access token its agent holds.
	Token string
	// Limits it was taken with: a sandbox restored from it has them.
	Limits runtime.Limits
}
