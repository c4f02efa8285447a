// Command tlsfloor is the floor TestDriverSizeBound measures drivers
// against: a program that only opens a TLS 1.3 client connection, as
// every driver does to other core workers (crypto/tls, x509 and their
// ciphers are most of a driver's size).
package main

import (
	"crypto/tls"
	"log"
	"os"
)

func main() {
	conn, err := tls.Dial("tcp", os.Args[1], &tls.Config{MinVersion: tls.VersionTLS13})
	if err != nil {
		log.Fatal(err)
	}
	conn.Close()
}
