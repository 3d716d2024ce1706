"""Language: display names and ISO 639 codes used by the translation tasks."""

from __future__ import annotations

from enum import Enum

from inference4py.errors import ConfigurationError

__all__ = ["Language"]


class Language(Enum):
    """A language with its English display name, ISO 639-1 and ISO 639-2/T codes."""

    EN = ("English", "en", "eng")
    FR = ("French", "fr", "fra")
    DE = ("German", "de", "deu")
    ES = ("Spanish", "es", "spa")
    IT = ("Italian", "it", "ita")
    PT = ("Portuguese", "pt", "por")
    NL = ("Dutch", "nl", "nld")
    RO = ("Romanian", "ro", "ron")
    RU = ("Russian", "ru", "rus")
    ZH = ("Chinese", "zh", "zho")
    JA = ("Japanese", "ja", "jpn")
    KO = ("Korean", "ko", "kor")
    AR = ("Arabic", "ar", "ara")
    PL = ("Polish", "pl", "pol")
    SV = ("Swedish", "sv", "swe")
    FI = ("Finnish", "fi", "fin")
    CS = ("Czech", "cs", "ces")
    TR = ("Turkish", "tr", "tur")
    UK = ("Ukrainian", "uk", "ukr")
    HI = ("Hindi", "hi", "hin")

    def __init__(self, display_name: str, iso_code: str, iso3_code: str) -> None:
        self.display_name = display_name
        self.iso_code = iso_code
        self.iso3_code = iso3_code

    def __str__(self) -> str:
        return self.display_name

    @classmethod
    def of(cls, value: Language | str) -> Language:
        """Parse a Language, an ISO code ("de", "deu") or an English name ("German")."""
        if isinstance(value, Language):
            return value
        if isinstance(value, str):
            key = value.strip().lower()
            for lang in cls:
                if key in (lang.iso_code, lang.iso3_code, lang.display_name.lower(), lang.name.lower()):
                    return lang
        raise ConfigurationError(
            f"Unknown language {value!r}. Use a Language member or one of the codes: "
            + ", ".join(lang.iso_code for lang in cls)
        )
