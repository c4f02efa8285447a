package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// clientFlags are shared by every verb that talks to a running node.
func clientFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "address", EnvVars: []string{"NODEUP_ADDRESS"},
			Usage: "host:port of any node's RPC port, or unix:///path/nodeup.sock (default: NODEUP_ADDRESS, else the node running on this machine, over its Unix socket)"},
		&ucli.StringFlag{Name: "token", EnvVars: []string{wire.EnvToken},
			Usage: "token to present to a node reached over TCP (nodeup token create); not needed over the node's Unix socket"},
		&ucli.StringFlag{Name: "token-file", Usage: "read the token from this file (instead of --token)"},
		&ucli.DurationFlag{Name: "timeout", Value: 20 * time.Second, Usage: "how long to wait for an answer"},
	}
}

// resolveAddress picks the node to talk to: --address or NODEUP_ADDRESS, then
// the node most recently started on this machine (its Unix socket, else its
// TCP address), then the default data dir's. A Unix socket is returned as
// rpc.UnixPrefix and its path.
func resolveAddress(c *ucli.Context) (string, error) {
	addr := c.String("address")
	// A node running here, named by its host:port, is reached over its
	// Unix socket unless a token is given (a secure node wants TLS and a
	// token on TCP; the socket trusts this user).
	if sock := wire.LocalSocket(addr); sock != "" && c.String("token") == "" && c.String("token-file") == "" {
		addr = sock
	}
	if addr == "" {
		if addr = wire.CurrentSocket(); addr == "" {
			addr = wire.CurrentAddress()
		}
	}
	if addr == "" {
		dir := os.Getenv("NODEUP_DATA_DIR")
		if dir == "" {
			dir = defaultDataDir()
		}
		if addr = cluster.ReadDataDirAddress(dir); addr != "" {
			if sock := filepath.Join(dir, cluster.SocketFile); fileExists(sock) {
				addr = rpc.UnixPrefix + sock
			}
		}
	}
	if addr == "" {
		return "", fmt.Errorf("no nodeup node found on this machine: start one (nodeup start --head), or pass --address host:port or set NODEUP_ADDRESS")
	}
	if strings.HasPrefix(addr, rpc.UnixPrefix) {
		return addr, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, fmt.Sprint(cluster.DefaultPort))
	}
	return addr, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// resolveToken returns the token to present: --token or NODEUP_TOKEN, else
// the first line of --token-file; "" for none.
func resolveToken(c *ucli.Context) (string, error) {
	if t := c.String("token"); t != "" {
		return strings.TrimSpace(t), nil
	}
	path := c.String("token-file")
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	t, _, _ := strings.Cut(string(b), "\n")
	if t = strings.TrimSpace(t); t == "" {
		return "", fmt.Errorf("--token-file %s: empty (want the token printed by nodeup token create)", path)
	}
	return t, nil
}

// call makes one RPC to the resolved node.
func call(c *ucli.Context, method string, req, resp any) error {
	addr, err := resolveAddress(c)
	if err != nil {
		return err
	}
	token, err := resolveToken(c)
	if err != nil {
		return err
	}
	return callAt(c, addr, token, c.Duration("timeout"), method, req, resp)
}

// callAt makes one RPC to addr (a node or a core worker), presenting token
// ("" for none), within timeout. Safe to call from several goroutines.
func callAt(c *ucli.Context, addr, token string, timeout time.Duration, method string, req, resp any) error {
	ctx, cancel := context.WithTimeout(c.Context, timeout)
	defer cancel()
	network, dialAddr := "tcp", addr
	opts := []rpc.DialOption{rpc.WithToken(token)}
	if p, ok := strings.CutPrefix(addr, rpc.UnixPrefix); ok {
		network, dialAddr = "unix", p
	} else if token != "" {
		// Over TCP a token travels only inside TLS, to the cluster the
		// token pins; without one the call goes plaintext, which only an
		// --insecure node answers.
		dial, err := pki.TokenDialer(token)
		if err != nil {
			return fmt.Errorf("--token: %w", err)
		}
		opts = append(opts, rpc.WithDialer(dial))
	}
	cl, err := rpc.Dial(ctx, network, dialAddr, []byte{wire.PreambleRPC}, wire.ProtocolVersion, opts...)
	if err != nil {
		return fmt.Errorf("cannot reach node at %s: %w", addr, err)
	}
	defer cl.Close()
	if err := cl.Call(ctx, method, req, resp); err != nil {
		return fmt.Errorf("%s at %s: %w%s", method, addr, err, localHint(addr, token, err))
	}
	return nil
}

// localHint says what to do when a plaintext call without a token to an
// address of this machine was refused: such a node is reached over its
// Unix socket, and none is recorded for addr (a node of another user, or
// started with another TMPDIR).
func localHint(addr, token string, err error) string {
	var re *rpc.Error
	if token != "" || strings.HasPrefix(addr, rpc.UnixPrefix) || !errors.As(err, &re) || re.Code != wire.CodePermissionDenied || !isLocalAddr(addr) {
		return ""
	}
	return fmt.Sprintf(" (no node of this user on this machine records its Unix socket for %s under %s: reach it with --address unix://<its data dir>/%s, or pass a token)",
		addr, wire.LocalNodesDir(), cluster.SocketFile)
}

// isLocalAddr says whether addr's host is a loopback address or one of
// this machine's interface addresses.
func isLocalAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	if host == "localhost" || ip != nil && ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil || ip == nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

func writeJSONOut(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func kvCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "kv",
		Usage: "read and write the cluster's internal key-value store",
		Subcommands: []*ucli.Command{
			{
				Name: "get", Usage: "print a key's value", ArgsUsage: "<key>", Flags: clientFlags(),
				Action: func(c *ucli.Context) error {
					if c.NArg() != 1 {
						return fmt.Errorf("nodeup kv get takes one key, got %d arguments", c.NArg())
					}
					var resp wire.KVResponse
					if err := call(c, wire.MethodKVGet, &wire.KVRequest{Key: c.Args().First()}, &resp); err != nil {
						return err
					}
					_, err := c.App.Writer.Write(append(resp.Entries[0].Value, '\n'))
					return err
				},
			},
			{
				Name: "put", Usage: "set a key", ArgsUsage: "<key> <value>", Flags: clientFlags(),
				Action: func(c *ucli.Context) error {
					if c.NArg() != 2 {
						return fmt.Errorf("nodeup kv put takes a key and a value, got %d arguments", c.NArg())
					}
					return call(c, wire.MethodKVSet, &wire.KVRequest{Key: c.Args().Get(0), Value: []byte(c.Args().Get(1))}, &wire.KVResponse{})
				},
			},
			{
				Name: "delete", Usage: "delete a key", ArgsUsage: "<key>", Flags: clientFlags(),
				Action: func(c *ucli.Context) error {
					if c.NArg() != 1 {
						return fmt.Errorf("nodeup kv delete takes one key, got %d arguments", c.NArg())
					}
					return call(c, wire.MethodKVDelete, &wire.KVRequest{Key: c.Args().First()}, &wire.KVResponse{})
				},
			},
			{
				Name: "list", Usage: "list keys under a prefix", ArgsUsage: "[<prefix>]",
				Flags: append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"}),
				Action: func(c *ucli.Context) error {
					var resp wire.KVResponse
					if err := call(c, wire.MethodKVList, &wire.KVRequest{Prefix: c.Args().First()}, &resp); err != nil {
						return err
					}
					if c.Bool("json") {
						out := map[string]string{}
						for _, e := range resp.Entries {
							out[e.Key] = string(e.Value)
						}
						return writeJSONOut(c.App.Writer, out)
					}
					for _, e := range resp.Entries {
						fmt.Fprintf(c.App.Writer, "%s\t%s\n", e.Key, strings.ReplaceAll(string(e.Value), "\n", `\n`))
					}
					return nil
				},
			},
		},
	}
}
