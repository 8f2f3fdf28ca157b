package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// mintToken signs a buyer token for user, valid until exp.
func mintToken(secret []byte, user string, exp time.Time) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   user,
		ExpiresAt: jwt.NewNumericDate(exp),
		IssuedAt:  jwt.NewNumericDate(time.Now()),
	})
	return t.SignedString(secret)
}

func runToken(_ context.Context, cfg *Config, stdout, _ io.Writer) error {
	exp := time.Now().Add(cfg.TTL)
	if cfg.Count == 1 && cfg.User != "" {
		tok, err := mintToken([]byte(cfg.JWTSecret), cfg.User, exp)
		if err != nil {
			return fmt.Errorf("signing token: %w", err)
		}
		_, err = fmt.Fprintln(stdout, tok)
		return err
	}
	toks, err := mintTokens([]byte(cfg.JWTSecret), cfg.UserPrefix, cfg.Count, exp)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	for _, t := range toks {
		w.WriteString(t)
		w.WriteByte('\n')
	}
	return w.Flush()
}
