package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/fleet/source"
	"github.com/edgeheal/edgeheal/fleet/web"
)

// serve runs the subscriber and the HTTP(S) server until ctx ends.
func serve(ctx context.Context, c fleet.Config, path string, log *slog.Logger) error {
	store := fleet.NewStore(c.MQTT.TopicPrefix)
	var tc *tls.Config
	if c.Web.TLS.Cert != "" {
		certs, err := web.NewCertificate(c.Web.TLS.Cert, c.Web.TLS.Key)
		if err != nil {
			return err
		}
		tc = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.Get}
	}
	if c.Web.Auth.Disabled {
		log.Warn("authentication is off (web.auth.disabled): anyone who reaches " + c.Listen + " sees the whole fleet")
	} else if u, err := web.LoadUsers(c.Web.Auth.UsersFile); err != nil {
		return err
	} else if u.Len() == 0 && c.Web.Auth.ProxyHeader == "" {
		log.Warn("no users yet: every request is refused until one is added", "users_file", c.Web.Auth.UsersFile,
			"how", "edgeheal-fleet user password NAME >> "+c.Web.Auth.UsersFile)
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", c.Listen, err)
	}
	sub := web.Subscription{Events: "all", Group: source.ClientID(c.MQTT)}
	if c.MQTT.Share != "" {
		sub = web.Subscription{Events: "shared", Group: c.MQTT.Share}
	}
	handler := web.Handler(web.Options{Store: store, Version: version, Logger: log, Auth: c.Web.Auth, Subscription: sub, Done: ctx.Done()})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tc,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	scheme := "http"
	if tc != nil {
		scheme = "https"
	}
	log.Info("edgeheal-fleet serving", "version", version, "url", scheme+"://"+ln.Addr().String()+"/", "broker", c.MQTT.Broker,
		"auth", authMode(c.Web.Auth))
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		if tc != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	})
	if c.MQTT.Broker == "" {
		store.SetConnected(false, "no broker configured: set mqtt.broker in "+path)
		log.Warn("no broker configured: serving an empty fleet", "config", path)
	} else {
		wg.Go(func() {
			if err := source.Run(ctx, source.Options{MQTT: c.MQTT, Store: store, Logger: log}); err != nil {
				log.Error("mqtt", "err", err)
			}
		})
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	wg.Wait()
	return nil
}

func authMode(a fleet.Auth) string {
	switch {
	case a.Disabled:
		return "off"
	case a.ProxyHeader != "":
		return "proxy header " + a.ProxyHeader + " or users of " + a.UsersFile
	}
	return "users of " + a.UsersFile
}
