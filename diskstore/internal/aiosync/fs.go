package aiosync

import "github.com/cockroachdb/pebble/v2/vfs"

// FS returns fs with the files it opens syncing through s (files without
// a descriptor sync as before).
func FS(fs vfs.FS, s *Syncer) vfs.FS { return &syncFS{FS: fs, s: s} }

type syncFS struct {
	vfs.FS
	s *Syncer
}

func (f *syncFS) wrap(file vfs.File, err error) (vfs.File, error) {
	if err != nil || file.Fd() == vfs.InvalidFd {
		return file, err
	}
	return &syncFile{File: file, fd: file.Fd(), s: f.s}, nil
}

func (f *syncFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return f.wrap(f.FS.Create(name, category))
}

func (f *syncFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return f.wrap(f.FS.Open(name, opts...))
}

func (f *syncFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return f.wrap(f.FS.OpenReadWrite(name, category, opts...))
}

func (f *syncFS) OpenDir(name string) (vfs.File, error) { return f.wrap(f.FS.OpenDir(name)) }

func (f *syncFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return f.wrap(f.FS.ReuseForWrite(oldname, newname, category))
}

func (f *syncFS) Unwrap() vfs.FS { return f.FS }

// syncFile is a file whose Sync and SyncData go through the Syncer.
type syncFile struct {
	vfs.File
	fd uintptr
	s  *Syncer
}

func (f *syncFile) Sync() error     { return f.s.Sync(f.fd, false) }
func (f *syncFile) SyncData() error { return f.s.Sync(f.fd, true) }
