package middleware

// SprayBucket returns the bucket of password under secret, as a guard
// with Device.Secret set to secret counts it.
func SprayBucket(secret []byte, password string) uint16 {
	s, err := newSprayer(SprayOptions{}, "username", secret)
	if err != nil {
		panic(err)
	}
	return s.bucket(password)
}
