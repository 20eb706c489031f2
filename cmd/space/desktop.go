package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/client"
)

// desktopCmd drives a desktop sandbox's screen (the native computer-use
// API): a command per action an agent's tool call would send.
func (a *app) desktopCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "desktop",
		Short: "See and drive a desktop sandbox's screen (the desktop template)",
		Args:  cobra.NoArgs,
	}
	var width int
	shot := &cobra.Command{
		Use:   "screenshot ID",
		Short: "Write the screen as a PNG to stdout (space desktop screenshot ID > s.png)",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			png, err := a.client().DesktopScreenshot(c.Context(), args[0], width)
			if err != nil {
				return err
			}
			_, err = a.stdout.Write(png)
			return err
		},
	}
	shot.Flags().IntVar(&width, "width", 0, "scale down to this width, keeping the aspect")
	zoom := &cobra.Command{
		Use:   "zoom ID X0 Y0 X1 Y1",
		Short: "Write the part of the screen from X0 Y0 (top left) to X1 Y1 (bottom right) as a PNG to stdout",
		Args:  exactArgs(5),
		RunE: func(c *cobra.Command, args []string) error {
			from, err := point(args[1], args[2])
			if err != nil {
				return err
			}
			to, err := point(args[3], args[4])
			if err != nil {
				return err
			}
			res, err := a.client().DesktopAct(c.Context(), args[0], client.DesktopAction{Action: "zoom", Region: append(from, to...)})
			if err != nil {
				return err
			}
			_, err = a.stdout.Write(res.Screenshot)
			return err
		},
	}
	cmd.AddCommand(shot, zoom,
		a.desktopActionCmd("click ID X Y", "Left-click at X Y", 3, func(args []string) (client.DesktopAction, error) {
			p, err := point(args[1], args[2])
			return client.DesktopAction{Action: "left_click", Coordinate: p}, err
		}),
		a.desktopActionCmd("move ID X Y", "Move the mouse to X Y", 3, func(args []string) (client.DesktopAction, error) {
			p, err := point(args[1], args[2])
			return client.DesktopAction{Action: "mouse_move", Coordinate: p}, err
		}),
		a.desktopActionCmd("type ID TEXT", "Type TEXT", 2, func(args []string) (client.DesktopAction, error) {
			return client.DesktopAction{Action: "type", Text: &args[1]}, nil
		}),
		a.desktopActionCmd("key ID KEYS", "Press keys, xdotool's names (ctrl+s, Return, ctrl+a Delete)", 2, func(args []string) (client.DesktopAction, error) {
			return client.DesktopAction{Action: "key", Text: &args[1]}, nil
		}),
		a.desktopActionCmd("scroll ID up|down|left|right N", "Scroll N wheel clicks where the mouse is", 3, func(args []string) (client.DesktopAction, error) {
			n, err := strconv.Atoi(args[2])
			if err != nil {
				return client.DesktopAction{}, usagef("N must be a whole number, not %q", args[2])
			}
			return client.DesktopAction{Action: "scroll", ScrollDirection: args[1], ScrollAmount: &n}, nil
		}),
	)
	return cmd
}

// desktopActionCmd is a command that sends one action and prints where
// the cursor is afterwards.
func (a *app) desktopActionCmd(use, short string, n int, build func([]string) (client.DesktopAction, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(n),
		RunE: func(c *cobra.Command, args []string) error {
			act, err := build(args)
			if err != nil {
				return err
			}
			res, err := a.client().DesktopAct(c.Context(), args[0], act)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "cursor %d %d\n", res.Cursor.X, res.Cursor.Y)
			return nil
		},
	}
}

func point(x, y string) ([]int, error) {
	px, err := strconv.Atoi(x)
	if err != nil {
		return nil, usagef("X must be a whole number, not %q", x)
	}
	py, err := strconv.Atoi(y)
	if err != nil {
		return nil, usagef("Y must be a whole number, not %q", y)
	}
	return []int{px, py}, nil
}
