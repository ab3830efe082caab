package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/edgeheal/edgeheal/fleet/web"
)

const userUsage = `usage: edgeheal-fleet user password NAME   < password
       edgeheal-fleet user token NAME

Prints a line for the users file (web.auth.users_file, default
/etc/edgeheal-fleet/users); append it, e.g. with >>. password: the
password is read from standard input (its first line), the line holds its
bcrypt hash (HTTP basic authentication, as a browser asks). token: a new
random bearer token is printed on standard error, once, and the line holds
its SHA-256 (Authorization: Bearer, as Prometheus sends it).
`

func cmdUser(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[1] == "" || strings.ContainsAny(args[1], ": \t") {
		fmt.Fprint(stderr, userUsage)
		return 2
	}
	name := args[1]
	switch args[0] {
	case "password":
		line, err := bufio.NewReader(stdin).ReadString('\n')
		password := strings.TrimRight(line, "\r\n")
		if password == "" {
			fmt.Fprintf(stderr, "edgeheal-fleet: no password on standard input (%v)\n", err)
			return 2
		}
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
		if err != nil {
			fmt.Fprintf(stderr, "edgeheal-fleet: %v\n", err)
			return 2
		}
		fmt.Fprintf(stdout, "%s:%s\n", name, hash)
		return 0
	case "token":
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		token := base64.RawURLEncoding.EncodeToString(b)
		fmt.Fprintf(stderr, "the token (shown once; give it to the client): %s\n", token)
		fmt.Fprintln(stdout, web.TokenLine(name, token))
		return 0
	}
	fmt.Fprint(stderr, userUsage)
	return 2
}
