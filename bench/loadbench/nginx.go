package loadbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// N0 is nginx from the distribution's package as a reverse-proxy hop to
// the same upstream, with keep-alive connections to it: the hop most
// operators would otherwise put in front of a webhook receiver. It runs
// with a configuration, pid file, logs and temp directories of its own
// under the run's directory, never as the machine's nginx service.

// noInstallEnv set to anything but "" keeps the benchmark and its tests
// from installing nginx: N0 is then left out where it is missing.
const noInstallEnv = "HOOKSTAMP_BENCH_NO_INSTALL"

// nginxBinary finds nginx, installing Debian's package when it is missing
// and the benchmark runs as root with apt-get, as scripts/check-deps.sh
// does for pgbouncer, unless noInstallEnv is set. "" when there is none.
func nginxBinary(logf func(string, ...any)) string {
	if p := findNginx(); p != "" {
		return p
	}
	if os.Geteuid() != 0 || os.Getenv(noInstallEnv) != "" {
		return ""
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return ""
	}
	logf("N0: installing nginx (apt-get install nginx-light)")
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, pkg := range []string{"nginx-light", "nginx"} {
		cmd := exec.Command("apt-get", "install", "-y", "-q", pkg)
		cmd.Env = env
		if err := cmd.Run(); err == nil {
			break
		}
	}
	// The package's own service is not the one measured: keep it off.
	_ = exec.Command("systemctl", "disable", "--now", "nginx").Run()
	return findNginx()
}

func findNginx() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	return ""
}

// nginxConf renders the configuration: as many workers as cores, no
// access log, the request passed on with its path (the load generator's
// /hook) over HTTP/1.1 with a pool of idle keep-alive connections to the
// upstream, client connections kept for as many requests as they send.
func nginxConf(dir, listen, upstream string, root bool) string {
	user := ""
	if root {
		// Workers must reach the temp directories inside the run's
		// private (0700) directory.
		user = "user root;\n"
	}
	return fmt.Sprintf(`%sworker_processes auto;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events {
  worker_connections 4096;
}
http {
  access_log off;
  client_body_temp_path %[2]s/client_body;
  proxy_temp_path %[2]s/proxy;
  fastcgi_temp_path %[2]s/fastcgi;
  uwsgi_temp_path %[2]s/uwsgi;
  scgi_temp_path %[2]s/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  upstream app {
    server %[3]s;
    keepalive 512;
    keepalive_requests 1000000;
  }
  server {
    listen %[4]s;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`, user, dir, strings.TrimPrefix(upstream, "http://"), listen)
}

// StartNginx runs nginx (bin) on a free loopback port in front of
// upstream and waits until it accepts connections.
func StartNginx(ctx context.Context, bin, dir, name, upstream string) (*Child, error) {
	ndir := filepath.Join(dir, name)
	if err := os.MkdirAll(ndir, 0o755); err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(ndir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf(ndir, addr, upstream, os.Geteuid() == 0)), 0o644); err != nil {
		return nil, err
	}
	// -e: no attempt to open the package's /var/log/nginx/error.log.
	cmd := exec.Command(bin, "-p", ndir, "-c", conf, "-e", filepath.Join(ndir, "error.log"))
	c, _, err := startCmd(cmd, dir, name, false)
	if err != nil {
		return nil, err
	}
	c.Addr = addr
	go func() { c.exit <- cmd.Wait() }()
	ready := make(chan error, 1)
	go func() { ready <- waitListening(ctx, addr, c.exit) }()
	return c, c.await(ctx, ready)
}

// waitListening polls addr until it accepts a connection or the process
// exits.
func waitListening(ctx context.Context, addr string, exit chan error) error {
	for {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case err := <-exit:
			exit <- err // for Stop
			return errors.Join(errors.New("exited before it was ready"), err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freePort returns a loopback address nobody listens on now.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
