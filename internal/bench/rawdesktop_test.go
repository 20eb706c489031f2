package bench

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPasswdUser(t *testing.T) {
	passwd := "root:x:0:0:root:/root:/bin/bash\n" +
		"user:x:1000:1001::/home/user:/bin/bash\n" +
		"odd:x:nope:1::/:/bin/sh\n" +
		"short:x\n"
	path := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(path, []byte(passwd), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		uid, gid int
		wantErr  bool
	}{
		{name: "user", uid: 1000, gid: 1001},
		{name: "root", uid: 0, gid: 0},
		{name: "odd", wantErr: true},
		{name: "short", wantErr: true},
		{name: "nobody", wantErr: true},
	} {
		uid, gid, err := passwdUser(path, tc.name)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v, want error %v", tc.name, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && (uid != tc.uid || gid != tc.gid) {
			t.Errorf("%s: %d:%d, want %d:%d", tc.name, uid, gid, tc.uid, tc.gid)
		}
	}
}
